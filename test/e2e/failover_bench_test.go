package e2e

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkFailover kills one node of a fresh three-node cluster, five
// times, with default settings (lease TTL 3 s, etcd election timeout 500 ms), and reports the median and
// the worst of: kill -> an actor the node owned serves a call; kill -> a
// reminder of that node that came due at the kill fires. "follower" kills
// a node whose etcd member does not lead; "leader" kills the node of the
// etcd leader, which adds etcd's election and its lease extension on
// promotion.
//
//	go test -run x -bench BenchmarkFailover -benchtime 1x ./test/e2e
func BenchmarkFailover(b *testing.B) {
	for _, leader := range []bool{false, true} {
		name := "follower"
		if leader {
			name = "leader"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				var serving, fired, stalls []time.Duration
				for run := range 5 {
					r := failoverOnce(b, leader)
					serving, fired, stalls = append(serving, r.serving), append(fired, r.fired), append(stalls, r.survivorStall)
					b.Logf("run %d: serving after %v, overdue timer fired after %v; survivor's own actors: slowest call %v, %d of %d calls failed",
						run+1, r.serving.Round(time.Millisecond), r.fired.Round(time.Millisecond), r.survivorStall.Round(time.Millisecond), r.survivorFailed, r.survivorCalls)
				}
				slices.Sort(serving)
				slices.Sort(fired)
				slices.Sort(stalls)
				b.ReportMetric(serving[2].Seconds(), "serving-median-s")
				b.ReportMetric(serving[4].Seconds(), "serving-max-s")
				b.ReportMetric(fired[2].Seconds(), "timer-median-s")
				b.ReportMetric(fired[4].Seconds(), "timer-max-s")
				b.ReportMetric(stalls[2].Seconds(), "survivor-stall-median-s")
				b.ReportMetric(stalls[4].Seconds(), "survivor-stall-max-s")
			}
		})
	}
}

// failoverResult is what one failover measured. survivorStall is the
// longest call (ok or failed) on counters the surviving caller node owns,
// made by 8 callers from before the kill until every call in flight at the
// kill has ended: what the kill costs actors that did not move.
type failoverResult struct {
	serving, fired, survivorStall time.Duration
	survivorCalls, survivorFailed int
}

func failoverOnce(b *testing.B, killLeader bool) (res failoverResult) {
	c := newCluster(b, 3, nil)
	ids := []string{"node1", "node2", "node3"}
	tab := c.waitBalanced(0, ids, 30*time.Second)
	leader := c.etcdLeader()
	victim, caller := -1, -1
	for i := range 3 {
		if victim < 0 && (ids[i] == leader) == killLeader && (killLeader || i > 0) {
			victim = i
		}
	}
	for i := range 3 {
		if caller < 0 && i != victim {
			caller = i
		}
	}
	onVictim := func(name string) string {
		return ownersOf(tab).key(b, name, name, func(o string) bool { return o == ids[victim] })
	}
	cl := c.client(caller)
	ctx := context.Background()
	probe, rem := onVictim("counter"), onVictim("reminderActor")
	if _, err := cl.GetOrCreate("counter", probe).Call(ctx, "increment", 1); err != nil {
		b.Fatal(err)
	}
	// Due 1.5 s from now; the kill comes at 1 s, so it is overdue while
	// its node is gone.
	due := time.Now().Add(1500 * time.Millisecond)
	if err := cl.GetOrCreate("reminderActor", rem).Send(ctx, "reminders", map[string]any{"text": "x", "at": due.UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	// Load on the survivor's own actors.
	load := startNodeLoad(b, cl, tab, ids[caller], 8)
	defer load.stop()
	time.Sleep(time.Until(due.Add(-500 * time.Millisecond)))
	killed := time.Now()
	c.nodes[victim].kill()
	serving, fired := time.Duration(0), time.Duration(0)
	deadline := killed.Add(60 * time.Second)
	for serving == 0 || fired == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("failover incomplete after 60 s (serving %v, fired %v)\n%s", serving, fired, c.logs())
		}
		if serving == 0 {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			if _, err := cl.GetOrCreate("counter", probe).Call(cctx, "getCount"); err == nil {
				serving = time.Since(killed)
			}
			cancel()
		}
		if fired == 0 {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			raw, err := cl.Get("reminderActor", rem).Call(cctx, "getState")
			cancel()
			if err == nil && string(raw) == `{"fired":["x"]}` {
				fired = time.Since(killed)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Calls in flight at the kill may still be waiting: let them end.
	load.waitPast(b, killed, 60*time.Second)
	load.stop()
	res.survivorCalls, res.survivorFailed, res.survivorStall = load.calls, load.failed, load.slowest
	for _, n := range c.nodes {
		n.kill()
	}
	res.serving, res.fired = serving, fired
	return res
}
