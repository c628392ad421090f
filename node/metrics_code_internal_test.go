package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
)

// rivet_calls_total's code is the error's kind, as it always was (alerts
// on it keep their meaning), and its reason what the caller was told
// (storage.no_space, which code counts as actor.unavailable, a
// failover's): a pair rivet does not list, or a user's own code, makes no
// series of its own.
func TestCallCodeIsTheKindAndReasonWhatTheCallerGets(t *testing.T) {
	for _, c := range []struct {
		err          error
		code, reason string
	}{
		{rivet.Reasonf(rivet.ErrUnavailable, "storage", "no_space", "full"), "actor.unavailable", "storage.no_space"},
		{fmt.Errorf("counter: commit failed: %w", rivet.Reasonf(rivet.ErrUnavailable, "storage", "no_space", "full")), "actor.unavailable", "storage.no_space"},
		{rivet.Reasonf(rivet.ErrUnavailable, "actor", "overloaded", "busy"), "actor.unavailable", "actor.overloaded"},
		{rivet.Errorf(rivet.ErrUnavailable, "not owned"), "actor.unavailable", "actor.unavailable"},
		{&rivet.Error{Kind: rivet.ErrUnavailable, Group: "made", Code: "up"}, "actor.unavailable", ""},
		{rivet.UserError("my_code", "no", nil), "user", ""},
		{context.Canceled, "canceled", ""},
		{rivet.AsError(context.Canceled), "canceled", ""},
		{rivet.AsError(context.DeadlineExceeded), "actor.timed_out", "actor.timed_out"},
		{context.DeadlineExceeded, "actor.timed_out", ""},
		{errors.New("plain"), "rivet.internal_error", ""},
	} {
		if code, reason := callCode(c.err), callReason(c.err); code != c.code || reason != c.reason {
			t.Errorf("%v: code %q, reason %q; want %q, %q", c.err, code, reason, c.code, c.reason)
		}
	}
}

// The help of two series says what an operator reading /metrics needs,
// not the code's names: the committer's stall threshold as a duration
// (it said "the committer's StallAfter", a field no flag or document
// names), and the code and reason a shed call counts under in
// rivet_calls_total (it said actor.unavailable alone, which an alert on
// reason="actor.overloaded" would look for in vain).
func TestMetricHelpSaysWhatAnOperatorNeeds(t *testing.T) {
	c := newCollector(nil)
	for _, h := range []struct {
		desc string
		want []string
	}{
		{c.commitStalls.String(), []string{"500ms"}},
		{c.callsShed.String(), []string{"code actor.unavailable", "reason actor.overloaded"}},
	} {
		for _, w := range h.want {
			if !strings.Contains(h.desc, w) || strings.Contains(h.desc, "StallAfter") {
				t.Errorf("%s: want %q in its help, and no field name of the code's", h.desc, w)
			}
		}
	}
}
