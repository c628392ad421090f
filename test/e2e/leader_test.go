package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// Killing the node whose etcd member leads must not stall the actors of
// the surviving nodes for etcd's request timeout. A write in flight at
// the kill was forwarded to the dead leader and lost; etcd's member keeps
// its caller waiting 6 s for it, which stalled every survivor's actor with
// a write in flight longer than the failover of the dead node's own
// actors. The node now gives such writes up once the new leader's first
// entry is applied (etcdstore.WithLeaderChanges), and their partitions are
// claimed again before their actors write again, so that such a write, if
// it applies after all, cannot land on a newer one (Host.InDoubt); the
// callers then learn from storage whether their write had applied (their
// reply) or not (UNAVAILABLE, which the client retries). The test checks
// that the survivor re-fenced, that no call failed (none with etcd's
// timeout, none with "outcome unknown"), and that no acknowledged
// increment was lost and none counted beyond those tried.
func TestEtcdLeaderLossDoesNotStallSurvivors(t *testing.T) { leaderLoss(t, false) }

// The same for a node on external etcd (--etcd-endpoints), which has no
// member of its own to say that the leader changed: it learns of the new
// term by asking etcd while a write waits (etcdstore.WithTermProbe).
func TestEtcdLeaderLossDoesNotStallANodeOnExternalEtcd(t *testing.T) { leaderLoss(t, true) }

// leaderLoss runs leaderLossOnce until a kill finds a write in flight: one
// that finds none shows nothing. In a steady load that is rare, and the
// kill is tried again on a fresh cluster.
func leaderLoss(t *testing.T, external bool) {
	for attempt := 1; attempt <= 3; attempt++ {
		if leaderLossOnce(t, external) {
			return
		}
		t.Logf("attempt %d: no write was in flight at the kill; again", attempt)
	}
	t.Fatal("three kills of the etcd leader's node found no write in flight on the survivor")
}

// leaderLossOnce kills the etcd leader's node of a fresh cluster under a
// load on a survivor's own actors and checks what the load saw; with
// external, the survivor is a 4th node whose etcd is the other three's
// members. It reports false if no call was in flight at the kill.
func leaderLossOnce(t *testing.T, external bool) bool {
	c := newCluster(t, 3, nil)
	defer func() {
		for _, n := range c.nodes {
			n.kill()
		}
	}()
	ids := []string{"node1", "node2", "node3"}
	members := c.nodes
	if external {
		n4 := c.externalNode("node4")
		n4.start()
		c.nodes = append(c.nodes, n4)
		ids = append(ids, "node4")
	}
	tab := c.waitBalanced(0, ids, 30*time.Second)
	leader := c.etcdLeader()
	victim, survivor := -1, -1
	for i, id := range ids {
		if id == leader {
			victim = i
		} else if survivor < 0 && (!external || id == "node4") {
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
	// And each caller's counter takes increments again (a partition left
	// refusing writes would fail every call, and failed calls end too).
	load.waitAcked(t, 30*time.Second)
	load.stop()

	t.Logf("killed %s (etcd leader); on %s's own actors: slowest call %v, %d of %d failed", ids[victim], ids[survivor], load.slowest.Round(time.Millisecond), load.failed, load.calls)
	if external && load.slowest > 4*time.Second {
		// etcd's own timeout would be 6 s.
		t.Errorf("a call on %s took %v after the leader died, want under 4 s", ids[survivor], load.slowest)
	}
	// A write in flight at the kill made the survivor claim its partition
	// again (the log line comes before the release; a balancer that
	// claims one first is fine). Without one, the kill showed nothing.
	if b, _ := os.ReadFile(c.nodes[survivor].logPath); !strings.Contains(string(b), "unknown outcome: claiming it again") {
		return false
	}
	for _, e := range load.errs {
		t.Logf("failed: %s", e)
		if strings.Contains(e, "request timed out") {
			t.Errorf("a call waited out etcd's request timeout after the leader died: %s", e)
		}
	}
	if load.failed > 0 {
		t.Errorf("%d calls failed: the callers of writes in doubt should have learned their outcome", load.failed)
	}
	// Nothing acknowledged was lost, nothing counted beyond what was
	// tried: read from etcd, not from the actors' memory, so that a late
	// write landing on a newer one would show.
	var alive []string
	for i, n := range members {
		if i != victim {
			alive = append(alive, n.etcdC)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: alive, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for key, n := range load.acked {
		enc := storage.EncodeKey([]string{key})
		k := "/rivet/" + storage.ActorPrefix(placement.Partition("counter", enc, tab.Count), "counter", enc) + storage.StateSuffix
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := cli.Get(cctx, k)
		cancel()
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("state of %s (%s): %v, %d keys", key, k, err, len(resp.Kvs))
			continue
		}
		var st struct{ Count int }
		if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
			t.Errorf("state of %s: %q: %v", key, resp.Kvs[0].Value, err)
			continue
		}
		if st.Count < n || st.Count > load.tried[key] {
			t.Errorf("count of %s in etcd is %d: %d increments acknowledged, %d tried", key, st.Count, n, load.tried[key])
		}
	}
	if t.Failed() {
		t.Logf("kill at %v\n%s", killed.Format(time.RFC3339Nano), c.logs())
	}
	return true
}
