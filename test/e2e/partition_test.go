package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// logTimes returns the times (unix seconds) of the node's log lines whose
// message is msg.
func logTimes(t *testing.T, n *nodeProc, msg string) []float64 {
	t.Helper()
	f, err := os.Open(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			TS  logTS  `json:"ts"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			out = append(out, float64(line.TS))
		}
	}
	return out
}

// A node cut off from everything (etcd peers, gossip, peers' gRPC: its
// network namespace loses its link) stops serving before any other node
// claims one of its partitions; a write sent to it meanwhile is never
// acknowledged; the others serve its actors from what was committed; when
// the link comes back it rejoins (gossip, etcd, ring) and takes its share
// again, with nothing acknowledged lost.
func TestPartitionedNodeStopsServingAndRejoins(t *testing.T) {
	lab := newNetLab(t, 3)
	c := newClusterWith(t, 3, func(i int, n *nodeProc) {
		ip := lab.addr(i)
		n.etcdC, n.etcdP, n.grpcFix, n.gossip = ip+":2379", ip+":2380", ip+":6420", ip+":7946"
		n.wrap = lab.wrap(i)
	})
	ids := []string{"node1", "node2", "node3"}
	tab := c.waitBalanced(0, ids, 60*time.Second)
	key := ownersOf(tab).key(t, "counter", "k", func(o string) bool { return o == "node3" })
	cl := c.client(0)
	ctx := context.Background()
	if n, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", key), "increment", 1); err != nil || n != 1 {
		t.Fatalf("increment: %d, %v", n, err)
	}

	cutAt := time.Now()
	lab.cut(3)
	// A write sent to node3 from inside its own namespace while it is cut
	// off: it must never be acknowledged (no quorum, then no claim).
	late := exec3(t, lab, c.nodes[2], "call", "counter", key, "increment", "100")

	// node1 serves node3's actor, from what was committed.
	var served time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		n, err := rivet.Call[int](cctx, cl.Get("counter", key), "getCount")
		cancel()
		if err == nil {
			if n != 1 {
				t.Fatalf("count on the new owner = %d, want 1", n)
			}
			served = time.Since(cutAt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node3's actor not served within 30 s of the cut: %v\n%s", err, c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := <-late; out.code == 0 {
		t.Fatalf("a write to the cut-off node was acknowledged: %q", out.stdout)
	}

	// node3 dropped its claims before anyone claimed one after the cut.
	lost := logTimes(t, c.nodes[2], "lease lost: dropping every partition claim")
	if len(lost) == 0 {
		t.Fatalf("node3 never dropped its claims\n%s", c.nodes[2].log())
	}
	cut := float64(cutAt.UnixNano()) / 1e9
	first := 0.0
	for _, n := range c.nodes[:2] {
		for _, ts := range logTimes(t, n, "partitions claimed") {
			if ts > cut && (first == 0 || ts < first) {
				first = ts
			}
		}
	}
	if first == 0 || lost[0] >= first {
		t.Fatalf("node3 dropped its claims at +%.3fs, not before the first claim after the cut (+%.3fs)", lost[0]-cut, first-cut)
	}
	t.Logf("FIGURE partition: node3 stopped serving at +%.2fs, first claim elsewhere at +%.2fs, its actor served again at +%v", lost[0]-cut, first-cut, served.Round(time.Millisecond))

	// Asked meanwhile, node3 lists the members and partition owners it
	// last saw, and says that they may be out of date (a trial's operator
	// read its stale counts as the cluster's).
	for _, cmd := range []string{"members", "partitions"} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := execCommandContext(cctx, append(lab.wrap(3), bins.rivetctl, "--addr", c.nodes[2].grpcFix, "--timeout", "20s", cmd)...).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(b), "rivetctl: note: node node3 holds no lease (etcd does not answer it or has no leader") {
			t.Errorf("rivetctl %s on the cut-off node3: %v\n%s\nwant its tables and a note that they may be out of date", cmd, err, b)
		}
	}

	// Heal: node3 rejoins and takes partitions again.
	lab.heal(3)
	healedAt := time.Now()
	c.waitBalanced(0, ids, 60*time.Second)
	t.Logf("FIGURE partition: node3 owns partitions again %v after the link came back", time.Since(healedAt).Round(time.Millisecond))
	if n, err := rivet.Call[int](ctx, cl.Get("counter", key), "getCount"); err != nil || n != 1 {
		t.Fatalf("count after healing = %d, %v; want 1 (the cut-off write must not land)", n, err)
	}
}

type ctlResult struct {
	stdout string
	code   int
}

// exec3 runs rivetctl inside host i's namespace against node n, in the
// background.
func exec3(t *testing.T, lab *netLab, n *nodeProc, args ...string) <-chan ctlResult {
	out := make(chan ctlResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := execCommandContext(ctx, append(append(lab.wrap(3), bins.rivetctl, "--addr", n.grpcFix, "--timeout", "20s"), args...)...)
		b, err := cmd.Output()
		code := 0
		if err != nil {
			code = 1
		}
		out <- ctlResult{stdout: string(b), code: code}
	}()
	return out
}
