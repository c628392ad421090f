package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A node whose disk was lost comes back as a new etcd member in place of
// its old one (the procedure of docs/deploy.md, "Replacing a member that
// lost its data"): its old member removed and a new one added with the
// same peer address, it starts with --etcd-initial-cluster-state existing,
// joins, serves, and the cluster's data is intact. Before the flag, such a
// node could not start at all ("member has already been bootstrapped").
func TestANodeThatLostItsDataRejoinsAsANewMember(t *testing.T) {
	c := newCluster(t, 3, nil)
	defer func() {
		for _, n := range c.nodes {
			n.kill()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(0)
	if _, err := cl.GetOrCreate("counter", "disk").Call(ctx, "increment", 5); err != nil {
		t.Fatal(err)
	}
	victim := c.nodes[2]
	victim.kill()
	if err := os.RemoveAll(filepath.Join(victim.dataDir, "etcd")); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.nodes[0].etcdC, c.nodes[1].etcdC}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ms, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if m.Name == "node3" {
			if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// etcd refuses to add a member until it judges the cluster healthy
	// again after the removal (its members recently active).
	for {
		_, err := cli.MemberAdd(ctx, []string{"http://" + victim.etcdP})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("member add: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	victim.extra = append(victim.extra, "--etcd-initial-cluster-state", "existing")
	victim.start()

	ms, err = cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"node1", "node2", "node3"}) {
		t.Fatalf("etcd members %v, want node1..node3 all started", names)
	}
	// The new member has the data: the counter, read through node3.
	raw, err := c.client(2).Get("counter", "disk").Call(ctx, "getCount")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n != 5 {
		t.Fatalf("count through the rejoined node = %s, %v; want 5", raw, err)
	}
	if out, _, code := victim.rivetctl("members"); code != 0 {
		t.Fatalf("rivetctl members on the rejoined node exited %d: %s", code, out)
	}
}
