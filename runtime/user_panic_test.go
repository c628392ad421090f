package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// noPanic runs fn and fails the test if a panic escapes it: on a node, a
// panic on a request's goroutine (gRPC does not recover them) takes the
// process down with every actor it serves.
func noPanic(t *testing.T, what string, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: a panic of the actor's code escaped the host: %v", what, r)
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return fn()
}

// A CreateState that panics (on an input it did not expect) fails the
// create with INTERNAL, as an action's panic does; the failed load leaves
// nothing behind, so a create with a good input goes through at once
// rather than waiting out its deadline for a load that never ends.
func TestAPanicInCreateStateFailsTheCreateAndNothingElse(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "mkPanic",
		CreateState: func(in json.RawMessage) (st, error) {
			if string(in) == `"boom"` {
				panic("CreateState panicked")
			}
			return st{N: 1}, nil
		},
		Actions: rivet.Actions[st]{"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil })},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "mkPanic", Key: []string{"k"}}
	err := noPanic(t, "create", func() error { _, err := e.host.Create(ctx(t), ref, json.RawMessage(`"boom"`)); return err })
	if !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("create whose CreateState panicked: %v, want ErrInternal", err)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Get after the failed create: %v, want ErrNotFound", err)
	}
	if _, err := e.host.Create(ctx(t), ref, json.RawMessage(`"ok"`)); err != nil {
		t.Fatalf("create with a good input: %v", err)
	}
	if n := callInt(t, e.host, "mkPanic", "k", "get", false); n != 1 {
		t.Fatalf("state = %d, want 1", n)
	}
}
