package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// Scheduled calls run once each, and a recurring one keeps its cadence,
// while their partitions move: a drain and its undoing, a node crashed
// (its claims taken over once its lease ends) and restarted.
func TestScheduledCallsRunOnceAcrossDrainFailoverAndRestart(t *testing.T) {
	t.Parallel()
	const parts = 8
	reg, err := rivet.Setup(testactors.Tally)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		return ClusterConfigForTest(t, id, endpoints, "/sched-move-test/", parts, join)
	}
	start := func(cfg Config) *Node { return StartForTest(t, ctx, cfg, reg) }
	a := start(config("a", nil))
	bcfg := config("b", []string{a.GossipAddr()})
	b := start(bcfg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n, keys = 25, 8
	for i := range keys {
		if got, err := rivet.Call[int](ctx, c.GetOrCreate("tally", fmt.Sprint("k", i)), "plan", n, 200); err != nil || got != n {
			t.Fatalf("plan k%d: %d %v", i, got, err)
		}
	}
	// A drain, and its undoing.
	if _, err := (backend{a.host, a}).Drain(ctx, "", false); err != nil {
		t.Fatalf("drain a: %v", err)
	}
	awaitCond(t, ctx, "a to hand off every partition", func() bool { return a.own.Owned() == 0 && b.own.Owned() == parts })
	if _, err := (backend{a.host, a}).Drain(ctx, "", true); err != nil {
		t.Fatalf("undo the drain of a: %v", err)
	}
	awaitCond(t, ctx, "a and b to share the partitions again", sharing(parts, a, b))
	// A crash: a takes b's partitions once b's lease ends; then b is back.
	crash(ctx, b)
	awaitCond(t, ctx, "a to take over b's partitions", func() bool { return a.own.Owned() == parts })
	bcfg.GossipAddr = b.GossipAddr()
	b2 := start(bcfg)
	awaitCond(t, ctx, "a and the restarted b to share the partitions", sharing(parts, a, b2))

	get := func(k string) testactors.TallyState {
		st, err := rivet.Call[testactors.TallyState](ctx, c.Get("tally", k), "get")
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		return st
	}
	for i := range keys {
		k := fmt.Sprint("k", i)
		awaitCond(t, ctx, "every call of "+k, func() bool { return len(get(k).Hits) == n })
		b0 := len(get(k).Beats)
		awaitCond(t, ctx, "two more beats of "+k, func() bool { return len(get(k).Beats) >= b0+2 })
	}
	for i := range keys {
		k := fmt.Sprint("k", i)
		st := get(k)
		for tag, c := range st.Hits {
			if c != 1 {
				t.Errorf("%s: call %s ran %d times", k, tag, c)
			}
		}
		for j := 1; j < len(st.Beats); j++ {
			if d := st.Beats[j] - st.Beats[j-1]; d <= 0 || d%1000 != 0 {
				t.Errorf("%s: beats %v: run %d due %d ms after the one before", k, st.Beats, j, d)
				break
			}
		}
	}
}
