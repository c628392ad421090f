package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
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

// setState encodes its set from a map, in Go's random map order: the same
// value encodes differently from one query to the next.
type setState struct {
	Tags map[string]bool
}

func (s setState) MarshalJSON() ([]byte, error) {
	var tags []string
	for k := range s.Tags {
		tags = append(tags, k)
	}
	return json.Marshal(struct {
		Tags []string `json:"tags"`
	}{tags})
}

func (s *setState) UnmarshalJSON(b []byte) error {
	var v struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s.Tags = map[string]bool{}
	for _, t := range v.Tags {
		s.Tags[t] = true
	}
	return nil
}

var setActor = rivet.Actor[setState]{
	Name: "tagged",
	Actions: rivet.Actions[setState]{
		"tag": rivet.Action(func(c *rivet.ActionCtx[setState], t string) (int, error) {
			if c.State.Tags == nil {
				c.State.Tags = map[string]bool{}
			}
			c.State.Tags[t] = true
			return len(c.State.Tags), nil
		}),
		"count": rivet.Query(func(c *rivet.ActionCtx[setState]) (int, error) { return len(c.State.Tags), nil }),
	},
}

var queryCaller = rivet.Actor[qcState]{
	Name: "qcaller",
	Actions: rivet.Actions[qcState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) { return c.State.N, nil }),
		"set": rivet.Action(func(c *rivet.ActionCtx[qcState], n int) (int, error) {
			c.State.N = n
			return n, nil
		}),
		// A query that calls a state-changing action of its own actor:
		// that action's change is committed, and is not the query's.
		"setVia": rivet.QueryArg(func(c *rivet.ActionCtx[qcState], n int) (int, error) {
			return rivet.Call[int](c.Context(), c.Client().Get("qcaller", c.Key()...), "set", n)
		}),
		// A buggy query that changes the state and then panics.
		"bumpAndPanic": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) {
			c.State.N = 999
			panic("boom")
		}),
	},
}

// Under CheckQueries: a state whose encoding varies (a set kept in a map)
// is no change; a query's call to a state-changing action of its own actor
// commits that action's change, which is not the query's; a query that
// changes the state and panics leaves no change behind.
func TestCheckQueriesJudgesTheQuerysOwnChange(t *testing.T) {
	e := newEnv(t, counterReg(t, setActor, queryCaller), func(c *runtime.Config) { c.CheckQueries = true })
	for i := range 8 {
		callInt(t, e.host, "tagged", "t", "tag", true, fmt.Sprintf("t%d", i))
	}
	for range 50 {
		if got := callInt(t, e.host, "tagged", "t", "count", false); got != 8 {
			t.Fatalf("count = %d, want 8", got)
		}
	}
	callInt(t, e.host, "qcaller", "c", "set", true, 1)
	if got := callInt(t, e.host, "qcaller", "c", "setVia", false, 42); got != 42 {
		t.Fatalf("setVia = %d, want 42", got)
	}
	if got := callInt(t, e.host, "qcaller", "c", "get", false); got != 42 {
		t.Fatalf("get = %d, want 42 (the action's committed change)", got)
	}
	if st := inspect(t, e.host, "qcaller", "c").State; string(st) != `{"n":42}` {
		t.Fatalf("committed state %s; want {\"n\":42}", st)
	}
	if _, err := call(t, e.host, "qcaller", "c", "bumpAndPanic", false); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("a query that panics: %v, want INTERNAL", err)
	}
	if got := callInt(t, e.host, "qcaller", "c", "get", false); got != 42 {
		t.Fatalf("get after the query that panicked = %d, want 42: its change undone", got)
	}
}

var querySender = rivet.Actor[qcState]{
	Name:   "qsender",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run:    func(*workflow.Ctx[qcState]) error { return nil },
	Actions: rivet.Actions[qcState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) { return c.State.N, nil }),
		// A buggy query that changes the state, then sends to its own
		// actor's queue: the send commits a message, not the state.
		"bumpAndSend": rivet.Query(func(c *rivet.ActionCtx[qcState]) (int, error) {
			c.State.N = 999
			_, err := rivet.Enqueue(c.Context(), c.Client().Get("qsender", c.Key()...), "q", 1)
			return c.State.N, err
		}),
	},
}

// A commit during a checked query that does not save the state (a message
// it sent its own actor) does not hide the query's change.
func TestCheckQueriesSeesAChangeBesideACommitOfAnotherKind(t *testing.T) {
	e := newEnv(t, counterReg(t, querySender), func(c *runtime.Config) { c.CheckQueries = true })
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "qsender", Key: []string{"s"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e.host, "qsender", "s", "bumpAndSend", false); !isQueryChanged(err) {
		t.Fatalf("a query that changes the state and sends: %v; want INTERNAL actor.query_changed_state", err)
	}
	if got := callInt(t, e.host, "qsender", "s", "get", false); got != 0 {
		t.Fatalf("get = %d after the refused query, want 0: its change undone", got)
	}
}
