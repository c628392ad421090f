package rivet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-go/rivet"
)

func TestOutcomeUnknown(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"the node said unavailable", rivet.Errorf(rivet.ErrUnavailable, "partition moving"), false},
		{"a broken connection", &rivet.Error{Kind: rivet.ErrUnavailable, Message: "connection reset"}, true},
		{"a timeout", rivet.Errorf(rivet.ErrTimeout, "outcome unknown"), true},
		{"the caller's deadline, wrapped", fmt.Errorf("call: %w", context.DeadlineExceeded), true},
		{"the caller cancelled", context.Canceled, true},
		{"not found", rivet.Errorf(rivet.ErrNotFound, "no such actor"), false},
		{"an actor's own error", rivet.UserError("order.closed", "closed", nil), false},
		{"any other error", errors.New("boom"), false},
	} {
		if got := rivet.OutcomeUnknown(c.err); got != c.want {
			t.Errorf("%s: OutcomeUnknown(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
