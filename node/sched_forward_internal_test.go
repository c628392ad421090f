package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/testactors"
)

// An operator connected to a node that does not own an actor lists its
// scheduled calls and cancels one (rivetctl schedule list, cancel): the
// cancelled call never runs, the others do, once.
func TestAScheduledCallIsListedAndCancelledThroughANonOwner(t *testing.T) {
	reg, err := rivet.Setup(testactors.Tally)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/sched-forward-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ := ownedRef(t, b, "tally", "t")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.Actor(ref.Name, ref.Key...).NoCreate() // as rivetctl asks
	ids, err := rivet.Call[[]string](ctx, c.GetOrCreate(ref.Name, ref.Key...), "planIDs", 3, 1500)
	if err != nil || len(ids) != 3 {
		t.Fatalf("planIDs: %v %v", ids, err)
	}
	ins, err := h.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, s := range ins.Schedules {
		listed = append(listed, s.ID)
	}
	if !slices.Equal(listed, ids) {
		t.Fatalf("listed %v through a, want %v", listed, ids)
	}
	if ok, err := h.CancelScheduledCall(ctx, ids[1]); err != nil || !ok {
		t.Fatalf("cancel %s through a: %v %v", ids[1], ok, err)
	}
	if ok, err := h.CancelScheduledCall(ctx, ids[1]); err != nil || ok {
		t.Fatalf("cancel %s again through a: %v %v, want false", ids[1], ok, err)
	}
	get := func() testactors.TallyState {
		st, err := rivet.Call[testactors.TallyState](ctx, c.Get(ref.Name, ref.Key...), "get")
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return st
	}
	awaitCond(t, ctx, "the calls not cancelled", func() bool { st := get(); return st.Hits["c0"] == 1 && st.Hits["c2"] == 1 })
	if st := get(); st.Hits["c1"] != 0 || len(st.Hits) != 2 {
		t.Fatalf("hits %v, want c0 and c2 once each", st.Hits)
	}
	if ins, err := h.Inspect(ctx); err != nil || len(ins.Schedules) != 0 {
		t.Fatalf("inspect after the runs: %+v %v", ins.Schedules, err)
	}
}
