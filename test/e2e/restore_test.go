package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// A three-node cluster restores from a backup (docs/deploy.md, "Backup and
// restore"): rivetctl backup through one node, then every node started
// with --etcd-restore-from in a new data directory, on the same ports. Two
// of them come up while the old cluster's first node still runs there: the
// restored cluster is another etcd cluster (a cluster ID of its own), so
// that old member is refused, not taken for one of its own, whose leader
// sent the restored members the writes made after the backup. Once it is
// gone, the first node restores too and joins: all three serve the state as
// of the backup.
func TestAClusterRestoresFromABackup(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.client(0)
	keys := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	for _, k := range keys {
		if _, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", k), "increment", 3); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(t.TempDir(), "cluster.db")
	if out, errOut, code := c.nodes[1].rivetctl("backup", backup); code != 0 || !strings.HasPrefix(out, "backed up ") {
		t.Fatalf("backup: exit %d, %q, %q", code, out, errOut)
	}
	for _, k := range keys {
		if _, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", k), "increment", 100); err != nil {
			t.Fatal(err)
		}
	}

	// Nodes 2 and 3 stop; node 1 (its etcd without a quorum now) runs on.
	old1 := c.nodes[0]
	for _, n := range c.nodes[1:] {
		n.kill()
	}
	restored := make([]*nodeProc, 3)
	for i, n := range c.nodes {
		r := newNode(t)
		r.etcdC, r.etcdP, r.grpcFix, r.gossip = n.etcdC, n.etcdP, n.grpcFix, n.gossip
		r.extra = append(append([]string(nil), n.extra...), "--etcd-restore-from", backup)
		restored[i] = r
	}
	ready := []<-chan string{restored[1].launch(), restored[2].launch()}
	restored[1].awaitServing(ready[0])
	restored[2].awaitServing(ready[1])
	check := func(n *nodeProc, what string) {
		t.Helper()
		for _, k := range keys {
			out, errOut, code := n.rivetctl("call", "--read-only", "counter", k, "getCount")
			if code != 0 || out != "3" {
				t.Fatalf("%s: %s is %q (exit %d, %s), want 3, as backed up", what, k, out, code, errOut)
			}
		}
	}
	check(restored[2], "two restored nodes beside the old first one")

	old1.kill()
	restored[0].start()
	check(restored[0], "the first node restored too")
	out, _, code := restored[0].rivetctl("members")
	if code != 0 || strings.Count(out, "alive") != 3 {
		t.Fatalf("members of the restored cluster:\n%s", out)
	}
	if out, _, code := restored[1].rivetctl("call", "counter", "r1", "increment", "1"); code != 0 || out != "4" {
		t.Fatalf("increment on the restored cluster: %q (exit %d)", out, code)
	}
}
