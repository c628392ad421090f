package runtime

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A wakeup, or a run of scheduled calls, that the wake loop took as its
// partition's handoff began (a drain, a rebalance) is left to the
// partition's next owner, which loads it from storage: the handoff drops
// the partition's timers. Its load, refused (the partition is not served
// any more), counted as that of a partition still held, so it was armed
// again, to fail a second later, with a warning each time: a drain of a
// node with sleeping workflows logged one for each that came due in the
// handoff's window (a soak of a three-node cluster).
func TestAWakeupDueAsItsPartitionIsHandedOffIsLeftToTheNextOwner(t *testing.T) {
	sleeper := rivet.Actor[echoState]{
		Name: "sleeper",
		Run:  func(ctx *workflow.Ctx[echoState]) error { return ctx.Sleep("nap", time.Hour) },
	}
	reg, err := rivet.Setup(sleeper)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	store := storage.NewMemory()
	t.Cleanup(func() { store.Close() })
	h, _ := memHostOn(t, reg, store, func(c *Config) { c.Logger = zap.New(core) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := Ref{Name: "sleeper", Key: []string{"s"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	p, err := h.PartitionOf(ref)
	if err != nil {
		t.Fatal(err)
	}
	// The handoff's first steps: out of service, timers dropped, the
	// actor gone from memory.
	if !h.own.BeginRelease(p) {
		t.Fatalf("partition %d not held", p)
	}
	h.cancelTimersOf(p)
	if a := h.loaded(ref); a != nil {
		h.evict(a)
	}
	if !h.own.Holds(p) {
		t.Fatal("the partition's claim is gone already: the test checks nothing")
	}
	wake := &wakeItem{ref: ref, id: "sleeper/wake"}
	sched := &wakeItem{ref: ref, id: schedTimer("sleeper/sched")}
	h.wakeOne(wake)
	h.fireSchedules(sched)
	for _, l := range logs.All() {
		t.Errorf("logged %q %v", l.Message, l.ContextMap())
	}
	h.timers.mu.Lock()
	defer h.timers.mu.Unlock()
	for _, it := range []*wakeItem{wake, sched} {
		if _, armed := h.timers.byID[it.id]; armed {
			t.Errorf("timer %q armed again on a partition handed off", it.id)
		}
	}
}
