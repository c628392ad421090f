package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// An actor whose type a new build no longer registers (removed, or
// renamed) stays in storage: Inspect shows it as it is stored, Destroy
// removes it, and everything else refuses it as an unknown type.
func TestActorsOfAnUnregisteredTypeCanBeInspectedAndDestroyed(t *testing.T) {
	lab := rivet.Actor[cancelState]{
		Name:   "lab",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			if err := ctx.Step("tick", func(s *workflow.StepCtx[cancelState]) error { s.State.Ticks = 3; return nil }); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, lab), nil)
	ref := runtime.Ref{Name: "lab", Key: []string{"x"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to sleep", 10*time.Second, func() bool {
		return inspect(t, e.host, "lab", "x").WorkflowStatus == runtime.WorkflowSleeping
	})

	// A registered type is stored too (its name sorts first), and the
	// next build drops lab.
	callInt(t, e.host, "counter", "c0", "increment", true, 1)
	e.reg = counterReg(t)
	core, logs := observer.New(zap.WarnLevel)
	e.cfg.Logger = zap.New(core)
	e.restart()
	// The node says so when it starts.
	waitFor(t, "the warning", 10*time.Second, func() bool {
		for _, l := range logs.FilterField(zap.String("actor_type", "lab")).All() {
			if l.ContextMap()["actors"] == "1" {
				return true
			}
		}
		return false
	})
	if n := len(logs.FilterField(zap.String("actor_type", "counter")).All()); n != 0 {
		t.Fatalf("%d warnings for a registered type", n)
	}
	ins, err := e.host.Inspect(ctx(t), ref)
	if err != nil || !ins.Unregistered || string(ins.State) != `{"ticks":3}` || len(ins.Queues) != 1 || ins.Queues[0].Depth != 1 {
		t.Fatalf("Inspect of an unregistered actor = %+v, %v; want it as stored, marked unregistered", ins, err)
	}
	if list, err := e.host.List(ctx(t), runtime.ListOptions{Name: "lab"}); err != nil || len(list.Actors) != 1 {
		t.Fatalf("list of the unregistered type = %+v, %v; want its actor", list, err)
	}
	if _, err := call(t, e.host, "lab", "x", "getState", false); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("call: %v, want ErrUnknownActor", err)
	}
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "lab", Key: []string{"never"}}); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("destroy of a name nothing is stored under: %v, want ErrUnknownActor", err)
	}
	if _, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "lab", Key: []string{"never"}}); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("inspect of a name nothing is stored under: %v, want ErrUnknownActor", err)
	}
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Inspect(ctx(t), ref); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("inspect after destroy: %v, want ErrUnknownActor", err)
	}
	// Gone from the list too: with nothing under it, the name reads as a
	// typo again.
	if list, err := e.host.List(ctx(t), runtime.ListOptions{Name: "lab"}); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("list after destroy = %+v, %v; want ErrUnknownActor", list, err)
	}
	// Nothing is left under the actor's keys, nor in the indexes.
	kvs, err := e.store.List(ctx(t), "", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if strings.Contains(kv.Key, "lab") {
			t.Errorf("left in storage: %s", kv.Key)
		}
	}
	// And a registered actor's Inspect does not say unregistered.
	callInt(t, e.host, "counter", "c", "increment", true, 1)
	if inspect(t, e.host, "counter", "c").Unregistered {
		t.Fatal("a registered actor is marked unregistered")
	}
}
