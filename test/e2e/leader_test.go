package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// Killing the node whose etcd member leads must not stall the actors of
// the surviving nodes for etcd's request timeout. A write in flight at
// the kill was forwarded to the dead leader and lost; etcd's member keeps
// its caller waiting 6 s for it, which stalled every survivor's actor with
// a write in flight longer than the failover of the dead node's own
// actors. The node now gives such writes up once the new leader's first
// entry is applied (etcdstore.WithLeaderChanges): they fail fast as
// outcome unknown. The test checks that no call failed with etcd's
// timeout, that the calls in flight failed with the leader change, and
// that no acknowledged increment was lost.
func TestEtcdLeaderLossDoesNotStallSurvivors(t *testing.T) {
	c := newCluster(t, 3, nil)
	ids := []string{"node1", "node2", "node3"}
	tab := c.waitBalanced(0, ids, 30*time.Second)
	leader := c.etcdLeader()
	victim, survivor := -1, -1
	for i, id := range ids {
		if id == leader {
			victim = i
		} else if survivor < 0 {
			survivor = i
		}
	}
	if victim < 0 {
		t.Fatalf("no etcd leader among %v (%q)", ids, leader)
	}
	cl := c.client(survivor)
	ctx := context.Background()

	// 8 callers on counters the survivor owns.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		acked   = map[string]int{}
		tried   = map[string]int{}
		failed  []string
		slowest time.Duration
	)
	for w := range 8 {
		key := ownersOf(tab).key(t, "counter", fmt.Sprintf("s%d-", w), func(o string) bool { return o == ids[survivor] })
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil && i < 1_000_000; i++ {
				mu.Lock()
				tried[key]++
				mu.Unlock()
				cctx, cancel := context.WithTimeout(loadCtx, 30*time.Second)
				t0 := time.Now()
				_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
				took := time.Since(t0)
				cancel()
				if loadCtx.Err() != nil {
					return
				}
				mu.Lock()
				slowest = max(slowest, took)
				if err != nil {
					failed = append(failed, err.Error())
				} else {
					acked[key]++
				}
				mu.Unlock()
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()

	time.Sleep(time.Second) // the load runs
	c.nodes[victim].kill()
	killed := time.Now()
	// Long enough for etcd's request timeout (6 s) to have shown.
	time.Sleep(8 * time.Second)
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("killed %s (etcd leader); on %s's own actors: slowest call %v, %d failed", ids[victim], ids[survivor], slowest.Round(time.Millisecond), len(failed))
	sawLeaderChange := false
	for _, e := range failed {
		t.Logf("failed: %s", e)
		if strings.Contains(e, "request timed out") {
			t.Errorf("a call waited out etcd's request timeout after the leader died: %s", e)
		}
		sawLeaderChange = sawLeaderChange || strings.Contains(e, "leader changed while the commit was in flight")
	}
	if !sawLeaderChange {
		t.Errorf("no call in flight at the kill failed with the leader change (%d failed)", len(failed))
	}
	// Nothing acknowledged was lost, nothing counted twice.
	for key, n := range acked {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := rivet.Call[int](cctx, cl.Get("counter", key), "getCount")
		cancel()
		if err != nil {
			t.Errorf("count of %s: %v", key, err)
			continue
		}
		if got < n || got > tried[key] {
			t.Errorf("count of %s is %d: %d increments acknowledged, %d tried", key, got, n, tried[key])
		}
	}
	if t.Failed() {
		t.Logf("kill at %v\n%s", killed.Format(time.RFC3339Nano), c.logs())
	}
}
