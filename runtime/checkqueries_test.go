package runtime_test

import (
	"errors"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type qcState struct {
	N int `json:"n"`
}

var queryChanger = rivet.Actor[qcState]{
	Name: "qchanger",
	Actions: rivet.Actions[qcState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) { return c.State.N, nil }),
		// A bug: a query that changes the state.
		"peekAndBump": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) {
			c.State.N = 999
			return c.State.N, nil
		}),
		"set": rivet.Action(func(c *rivet.ActionCtx[qcState], n int) (int, error) {
			c.State.N = n
			return n, nil
		}),
		// Sets n, then calls its own buggy query (which re-enters its
		// turn, and sees n), and returns what the state holds after.
		"setThenPeek": rivet.Action(func(c *rivet.ActionCtx[qcState], n int) (int, error) {
			c.State.N = n
			_, err := rivet.Call[int](c.Context(), c.Client().Get("qchanger", c.Key()...), "peekAndBump")
			if !isQueryChanged(err) {
				return 0, errors.New("the re-entered query was not refused")
			}
			return c.State.N, nil
		}),
	},
}

func isQueryChanged(err error) bool {
	var rerr *rivet.Error
	return errors.Is(err, rivet.ErrInternal) && errors.As(err, &rerr) && rerr.Group == "actor" && rerr.Code == "query_changed_state"
}

// Under CheckQueries a query that changes its actor's state fails, and its
// change is undone, in place: back to what the query found, which keeps
// the uncommitted change of a turn it re-entered.
func TestCheckQueriesFailsAQueryThatChangesTheStateAndUndoesIt(t *testing.T) {
	e := newEnv(t, counterReg(t, queryChanger), func(c *runtime.Config) { c.CheckQueries = true })
	if got := callInt(t, e.host, "qchanger", "q", "set", true, 7); got != 7 {
		t.Fatalf("set = %d", got)
	}
	if got := callInt(t, e.host, "qchanger", "q", "get", false); got != 7 {
		t.Fatalf("get = %d, want 7 (a query that changes nothing passes)", got)
	}
	if _, err := call(t, e.host, "qchanger", "q", "peekAndBump", false); !isQueryChanged(err) {
		t.Fatalf("a query that changes the state: %v; want INTERNAL actor.query_changed_state", err)
	}
	if got := callInt(t, e.host, "qchanger", "q", "get", false); got != 7 {
		t.Fatalf("get after the refused query = %d, want 7: its change undone", got)
	}
	if got := callInt(t, e.host, "qchanger", "q", "setThenPeek", false, 5); got != 5 {
		t.Fatalf("setThenPeek = %d, want 5: the outer turn's change kept, the query's undone", got)
	}
	if got := callInt(t, e.host, "qchanger", "q", "get", false); got != 5 {
		t.Fatalf("get = %d, want 5 (committed by setThenPeek)", got)
	}
}
