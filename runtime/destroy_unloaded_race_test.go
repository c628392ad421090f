package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// A Destroy of an actor that cannot be loaded (its state no longer
// decodes) reads that the actor is stored, then deletes it. Another
// Destroy and a Create of the same key may come between the read and the
// delete: nothing in memory serializes them, the failed load leaves no
// activation behind. The late delete must not take the new actor with it
// (its state, while it may be serving from memory); the Destroy says that
// what it was asked to destroy is gone.
func TestADestroyOfAnUndecodableActorSparesOneCreatedSinceItsRead(t *testing.T) {
	type v1 struct {
		N int `json:"n"`
	}
	type v2 struct {
		N string `json:"n"`
	}
	a1 := rivet.Actor[v1]{Name: "evolve", Actions: rivet.Actions[v1]{
		"inc": rivet.Action0(func(c *rivet.ActionCtx[v1]) (int, error) { c.State.N++; return c.State.N, nil }),
	}}
	a2 := rivet.Actor[v2]{Name: "evolve", Actions: rivet.Actions[v2]{
		"inc": rivet.Action0(func(c *rivet.ActionCtx[v2]) (int, error) { c.State.N += "x"; return len(c.State.N), nil }),
	}}
	e := newEnv(t, counterReg(t, a1), nil)
	callInt(t, e.host, "evolve", "k", "inc", true)
	e.reg = counterReg(t, a2)
	e.restart()
	ref := runtime.Ref{Name: "evolve", Key: []string{"k"}}

	// The first Destroy reads the meta key twice: in its load, which fails
	// (the state does not decode), then before its delete. It is held
	// after the second.
	held, release := make(chan struct{}), make(chan struct{})
	var metaGets atomic.Int32
	hook := func(key string) {
		if strings.Contains(key, "evolve") && strings.HasSuffix(key, storage.MetaSuffix) && metaGets.Add(1) == 2 {
			close(held)
			<-release
		}
	}
	e.store.afterGet.Store(&hook)
	first := make(chan error, 1)
	go func() { first <- e.host.Destroy(ctx(t), ref) }()
	select {
	case <-held:
	case err := <-first:
		t.Fatalf("the first Destroy ended (%v) before its delete was held", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first Destroy never read the actor before its delete")
	}
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatalf("the second Destroy: %v", err)
	}
	if n := callInt(t, e.host, "evolve", "k", "inc", true); n != 1 {
		t.Fatalf("the new actor of the key: inc = %d, want 1", n)
	}
	close(release)
	if err := <-first; !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("the first Destroy, whose actor another destroyed meanwhile: %v, want ErrNotFound", err)
	}
	// What storage holds, not what memory serves.
	e.restart()
	if list, err := e.host.List(ctx(t), runtime.ListOptions{Name: "evolve"}); err != nil || len(list.Actors) != 1 {
		t.Fatalf("List = %+v, %v; want the new actor", list.Actors, err)
	}
	if n := callInt(t, e.host, "evolve", "k", "inc", false); n != 2 {
		t.Fatalf("the new actor after a restart: inc = %d, want 2 (its state kept)", n)
	}
}
