package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// An actor whose stored state no longer decodes into its type (a field's
// type changed in the code) fails its calls with INTERNAL, saying so, and
// is left as stored; an operator's Destroy removes it all the same, as it
// does an actor whose hooks fail: without it, only a build that decodes
// the state again could.
func TestAnActorWhoseStateNoLongerDecodesCanBeDestroyed(t *testing.T) {
	type v1 struct {
		N int `json:"n"`
	}
	type v2 struct {
		N string `json:"n"`
	}
	a1 := rivet.Actor[v1]{Name: "evolve", Actions: rivet.Actions[v1]{
		"inc": rivet.Action0(func(c *rivet.ActionCtx[v1]) (int, error) { c.State.N++; return c.State.N, nil }),
	}}
	var destroyHooks int
	a2 := rivet.Actor[v2]{Name: "evolve", Actions: rivet.Actions[v2]{
		"inc": rivet.Action0(func(c *rivet.ActionCtx[v2]) (int, error) { c.State.N += "x"; return len(c.State.N), nil }),
	}, OnDestroy: func(*rivet.ActionCtx[v2]) error { destroyHooks++; return nil }}
	e := newEnv(t, counterReg(t, a1), nil)
	callInt(t, e.host, "evolve", "k", "inc", true)
	e.reg = counterReg(t, a2)
	e.restart()
	ref := runtime.Ref{Name: "evolve", Key: []string{"k"}}
	if _, err := call(t, e.host, "evolve", "k", "inc", true); !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("call of an actor whose state does not decode: %v, want ErrInternal saying so", err)
	}
	if ins, err := e.host.Inspect(ctx(t), ref); err != nil || string(ins.State) != `{"n":1}` {
		t.Fatalf("Inspect = %s, %v; want the stored state untouched", ins.State, err)
	}
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatalf("Destroy of an actor whose state does not decode: %v", err)
	}
	if destroyHooks != 0 {
		t.Fatalf("OnDestroy ran %d times without a state", destroyHooks)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Get after Destroy: %v, want ErrNotFound", err)
	}
	if list, err := e.host.List(ctx(t), runtime.ListOptions{Name: "evolve"}); err != nil || len(list.Actors) != 0 {
		t.Fatalf("List after Destroy = %+v, %v; want none", list.Actors, err)
	}
	if n := callInt(t, e.host, "evolve", "k", "inc", true); n != 1 {
		t.Fatalf("a new actor of the key: inc = %d, want 1", n)
	}
}
