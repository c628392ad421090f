package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
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
	// A kill that finds no write in flight shows nothing: in a steady
	// load that is rare, and the kill is tried again on a fresh cluster.
	for attempt := 1; attempt <= 3; attempt++ {
		if leaderLossOnce(t) {
			return
		}
		t.Logf("attempt %d: no write was in flight at the kill; again", attempt)
	}
	t.Fatal("three kills of the etcd leader's node found no write in flight on the survivor")
}

// leaderLossOnce kills the etcd leader's node of a fresh cluster under a
// load on a survivor's own actors and checks what the load saw. It
// reports false if no call was in flight at the kill.
func leaderLossOnce(t *testing.T) bool {
	c := newCluster(t, 3, nil)
	defer func() {
		for _, n := range c.nodes {
			n.kill()
		}
	}()
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
	load := startNodeLoad(t, cl, tab, ids[survivor], 8)
	defer load.stop()

	// The load runs in a steady state (its first calls activate actors;
	// afterwards each caller nearly always has a commit in flight).
	load.waitCalls(t, 8*30, 60*time.Second)
	c.nodes[victim].kill()
	killed := time.Now()
	// Every call in flight at the kill has ended, and every caller has
	// made one since.
	load.waitPast(t, killed, 60*time.Second)
	load.stop()

	t.Logf("killed %s (etcd leader); on %s's own actors: slowest call %v, %d of %d failed", ids[victim], ids[survivor], load.slowest.Round(time.Millisecond), len(load.failed), load.calls)
	if len(load.failed) == 0 {
		return false
	}
	sawLeaderChange := false
	for _, e := range load.failed {
		t.Logf("failed: %s", e)
		if strings.Contains(e, "request timed out") {
			t.Errorf("a call waited out etcd's request timeout after the leader died: %s", e)
		}
		sawLeaderChange = sawLeaderChange || strings.Contains(e, "leader changed while the commit was in flight")
	}
	if !sawLeaderChange {
		t.Errorf("no call in flight at the kill failed with the leader change (%d failed)", len(load.failed))
	}
	// Nothing acknowledged was lost, nothing counted twice.
	for key, n := range load.acked {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := rivet.Call[int](cctx, cl.Get("counter", key), "getCount")
		cancel()
		if err != nil {
			t.Errorf("count of %s: %v", key, err)
			continue
		}
		if got < n || got > load.tried[key] {
			t.Errorf("count of %s is %d: %d increments acknowledged, %d tried", key, got, n, load.tried[key])
		}
	}
	if t.Failed() {
		t.Logf("kill at %v\n%s", killed.Format(time.RFC3339Nano), c.logs())
	}
	return true
}

// nodeLoad is callers incrementing counters that one node owns, one
// counter each, through one client, until stop: per key the increments
// tried and acknowledged, the errors, and the slowest call (failed ones
// included). It measures what a fault elsewhere costs that node's actors.
type nodeLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu           sync.Mutex
	acked, tried map[string]int
	failed       []string
	calls        int
	slowest      time.Duration
	// started is when each caller's call in flight began (zero: none);
	// last, when its last ended call began.
	started, last []time.Time
}

func startNodeLoad(t testing.TB, cl *client.Client, tab client.PartitionTable, node string, callers int) *nodeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &nodeLoad{cancel: cancel, acked: map[string]int{}, tried: map[string]int{},
		started: make([]time.Time, callers), last: make([]time.Time, callers)}
	for w := range callers {
		key := ownersOf(tab).key(t, "counter", fmt.Sprintf("%s-load%d-", node, w), func(o string) bool { return o == node })
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
				t0 := time.Now()
				l.mu.Lock()
				l.tried[key]++
				l.started[w] = t0
				l.mu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
				took := time.Since(t0)
				cancel()
				if ctx.Err() != nil {
					return // stopped: not a failure of the cluster
				}
				l.mu.Lock()
				l.started[w], l.last[w] = time.Time{}, t0
				l.calls++
				l.slowest = max(l.slowest, took)
				if err != nil {
					l.failed = append(l.failed, err.Error())
				} else {
					l.acked[key]++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// waitPast waits until no call that began before t is in flight and every
// caller has ended a call that began after t.
func (l *nodeLoad) waitPast(t testing.TB, at time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		done := true
		for w := range l.started {
			if (!l.started[w].IsZero() && l.started[w].Before(at)) || !l.last[w].After(at) {
				done = false
			}
		}
		l.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load: calls from before %v not over, or callers without a call since, within %v", at.Format(time.StampMilli), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCalls waits until the load has ended n calls.
func (l *nodeLoad) waitCalls(t testing.TB, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		calls := l.calls
		l.mu.Unlock()
		if calls >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load: %d calls within %v, want %d", calls, within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the load and waits for its callers; the figures are final.
func (l *nodeLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}
