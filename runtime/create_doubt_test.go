package runtime_test

import (
	"errors"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

type doubtWakeState struct {
	N int `json:"n"`
}

// A create whose commit went in doubt, had applied, and was resolved as
// this caller's create, and whose OnWake then fails, creates nothing, as
// a create whose commit answered does: the create is taken back.
func TestACreateInDoubtWhoseHooksFailCreatesNothing(t *testing.T) {
	t.Parallel()
	act := rivet.Actor[doubtWakeState]{
		Name:   "doubtwake",
		OnWake: func(c *rivet.ActionCtx[doubtWakeState]) error { return errors.New("no connection") },
		Actions: rivet.Actions[doubtWakeState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[doubtWakeState]) (int, error) { return c.State.N, nil }),
		},
	}
	e := newEnvWith(t, counterReg(t, act), nil, true)
	ref := runtime.Ref{Name: "doubtwake", Key: []string{"k"}}
	e.store.applyThenFailSub.Store(storage.EncodeKey(ref.Key) + "/" + storage.MetaSuffix)
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err == nil {
		t.Fatal("the create of an actor whose OnWake fails succeeded")
	}
	if got := e.host.Stats().Resolved; got < 1 {
		t.Fatalf("Resolved = %d, want the create's doubt resolved", got)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after a create whose OnWake failed, Get: %v, want NotFound (the actor was left created)", err)
	}
}
