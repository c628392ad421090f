package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-go/rivet"
)

// rivet_calls_total's code is what the caller was told: a reason where the
// error carries one (a user trial's out-of-space refusals counted as
// actor.unavailable, a failover's label, while clients got
// storage.no_space), else its kind's; a pair rivet does not list, or a
// user's own code, makes no series of its own.
func TestCallCodeIsTheReasonTheCallerGets(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{rivet.Reasonf(rivet.ErrUnavailable, "storage", "no_space", "full"), "storage.no_space"},
		{fmt.Errorf("counter: commit failed: %w", rivet.Reasonf(rivet.ErrUnavailable, "storage", "no_space", "full")), "storage.no_space"},
		{rivet.Reasonf(rivet.ErrUnavailable, "actor", "overloaded", "busy"), "actor.overloaded"},
		{rivet.Errorf(rivet.ErrUnavailable, "not owned"), "actor.unavailable"},
		{&rivet.Error{Kind: rivet.ErrUnavailable, Group: "made", Code: "up"}, "actor.unavailable"},
		{rivet.UserError("my_code", "no", nil), "user"},
		{context.Canceled, "canceled"},
		{rivet.AsError(context.Canceled), "canceled"},
		{rivet.AsError(context.DeadlineExceeded), "actor.timed_out"},
		{context.DeadlineExceeded, "actor.timed_out"},
		{errors.New("plain"), "rivet.internal_error"},
	} {
		if got := callCode(c.err); got != c.want {
			t.Errorf("callCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
