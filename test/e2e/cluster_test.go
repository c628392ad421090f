package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// testCluster is a cluster of node processes on loopback, each running one
// member of a shared embedded etcd cluster.
type testCluster struct {
	t     testing.TB
	nodes []*nodeProc
}

// newCluster starts size nodes named node1..nodeN together (an etcd
// cluster serves only once a quorum of its members runs).
func newCluster(t testing.TB, size int, env []string, extra ...string) *testCluster {
	t.Helper()
	return newClusterWith(t, size, func(_ int, n *nodeProc) { n.env = env }, extra...)
}

// newClusterWith is newCluster with setup called on each node (numbered
// from 1) before the cluster's flags are made from its addresses.
func newClusterWith(t testing.TB, size int, setup func(i int, n *nodeProc), extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	var initial, join []string
	for i := range size {
		n := newNode(t)
		setup(i+1, n)
		c.nodes = append(c.nodes, n)
		initial = append(initial, fmt.Sprintf("node%d=http://%s", i+1, n.etcdP))
		join = append(join, n.gossip)
	}
	for i, n := range c.nodes {
		n.extra = append([]string{
			"--node-id", fmt.Sprintf("node%d", i+1),
			"--etcd-initial-cluster", strings.Join(initial, ","),
			"--join", strings.Join(join, ","),
			"--gossip-profile", "local",
		}, extra...)
	}
	var ready []<-chan string
	for _, n := range c.nodes {
		ready = append(ready, n.launch())
	}
	for i, n := range c.nodes {
		n.awaitServing(ready[i])
	}
	return c
}

// externalNode returns a node named id, not started, whose etcd is the
// members of the cluster's nodes (--etcd-endpoints) and which joins their
// gossip.
func (c *testCluster) externalNode(id string) *nodeProc {
	var endpoints []string
	for _, n := range c.nodes {
		if !slices.Contains(n.extra, "--etcd-endpoints") {
			endpoints = append(endpoints, "http://"+n.etcdC)
		}
	}
	n := newNode(c.t)
	n.extra = []string{
		"--node-id", id, "--etcd-endpoints", strings.Join(endpoints, ","),
		"--join", c.nodes[0].gossip, "--gossip-profile", "local",
	}
	return n
}

// client returns a Go client of node i, closed at the end of the test.
func (c *testCluster) client(i int) *client.Client {
	c.t.Helper()
	cl, err := client.New(c.nodes[i].grpcAddr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// waitBalanced waits until every partition is on the node the ring over
// the want nodes gives it, as node i sees it: the final assignment, after
// which partitions stop moving (a table with every partition owned may
// still be mid-rebalance, and a test that picks keys by owner from it
// would see them move).
func (c *testCluster) waitBalanced(i int, want []string, within time.Duration) client.PartitionTable {
	c.t.Helper()
	cl := c.client(i)
	ring := slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tab, err := cl.Partitions(ctx)
		cancel()
		if err == nil {
			ok := len(tab.Owners) == int(tab.Count)
			for _, p := range tab.Owners {
				ok = ok && p.Owner == placement.Owner(p.Partition, ring)
			}
			if ok {
				return tab
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("partitions not balanced over %v within %v: %+v (err %v)", want, within, tab, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *testCluster) logs() string {
	var b strings.Builder
	for i, n := range c.nodes {
		fmt.Fprintf(&b, "--- node%d ---\n%s\n", i+1, n.log())
	}
	return b.String()
}

// Three node processes, each one member of a 3-member embedded etcd
// cluster, form one cluster; every seed scenario passes with its rivetctl
// commands sent to the nodes in turn, so most are forwarded, and actors
// that call actors reach them on other nodes.
func TestThreeNodeClusterRunsEverySeedPattern(t *testing.T) {
	api := exampleapi.NewTestServer(map[string]int{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11})
	defer api.Close()
	c := newCluster(t, 3, []string{exampleapi.EnvVar + "=" + api.URL})
	ids := []string{"node1", "node2", "node3"}

	// Every node lists all three, alive.
	for i, n := range c.nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, errOut, code := n.rivetctl("members")
			alive := 0
			for _, id := range ids {
				for _, line := range strings.Split(out, "\n") {
					if strings.HasPrefix(line, id+" ") && strings.Contains(line, "alive") {
						alive++
					}
				}
			}
			if code == 0 && alive == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rivetctl members on node%d: %q (stderr %q, exit %d), want node1-3 alive\n%s", i+1, out, errOut, code, c.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.waitBalanced(0, ids, 30*time.Second)

	turn := 0
	seedScenarios(t, func() *nodeProc {
		turn++
		return c.nodes[turn%len(c.nodes)]
	})

	// The actors that called actors did so across nodes: their owners,
	// as Inspect reports them, differ.
	cl := c.client(0)
	owner := func(name, key string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ins, err := cl.Actor(name, key).NoCreate().Inspect(ctx)
		if err != nil {
			t.Fatalf("inspect %s %s: %v", name, key, err)
		}
		return ins.Info.Owner
	}
	crossed := func(from string, to ...string) bool {
		for _, k := range to {
			if owner(strings.Fields(k)[0], strings.Fields(k)[1]) != from {
				return true
			}
		}
		return false
	}
	if !crossed(owner("scatterGatherActor", "main"), "shardActor a", "shardActor b", "shardActor c") {
		t.Errorf("scatter-gather and its shards all live on one node; the test should make them cross")
	}
	// Coordinator -> worker across nodes: a worker key whose partition
	// another node owns, found from the partition table.
	coord := owner("coordinatorActor", "main")
	tab := c.waitBalanced(0, ids, 30*time.Second)
	worker := ownersOf(tab).key(t, "workerActor", "w", func(o string) bool { return o != "" && o != coord })
	if out, errOut, code := c.nodes[2].rivetctl("send", "coordinatorActor", "main", "task", fmt.Sprintf(`{"taskId":"t2","workerId":%q,"value":50}`, worker)); code != 0 {
		t.Fatalf("send task: %s %s", out, errOut)
	}
	waitState(t, c.nodes[1], "coordinatorActor", "main", 15*time.Second, `{"lastTaskId":"t2","lastResult":100}`)
	if w := owner("workerActor", worker); w == coord {
		t.Errorf("worker %s ended up on the coordinator's node %s", worker, coord)
	}

	// stats --all on any node has a row for each node, with the
	// partitions it owns, which add up to the table's; --node asks one.
	checkStatsAll(t, c.nodes[1], ids, int(tab.Count))
	if out, errOut, code := c.nodes[0].rivetctl("stats", "--node", "node3"); code != 0 || !strings.HasPrefix(out, "node              node3\n") {
		t.Errorf("rivetctl stats --node node3 on node1: %q (stderr %q, exit %d), want node3's counters", out, errOut, code)
	}
	// hot --all on any node names the coordinator, on its owner, among
	// the actors that had turns.
	if out, errOut, code := c.nodes[1].rivetctl("hot", "--all", "-n", "100", "-o", "json"); code != 0 {
		t.Errorf("rivetctl hot --all: exit %d, %s %s", code, out, errOut)
	} else {
		var hot []client.HotActor
		if err := json.Unmarshal([]byte(out), &hot); err != nil {
			t.Errorf("rivetctl hot --all -o json: %v: %s", err, out)
		}
		if !slices.ContainsFunc(hot, func(h client.HotActor) bool {
			return h.Name == "coordinatorActor" && slices.Equal(h.Key, []string{"main"}) && h.Node == coord && h.Turns > 0
		}) {
			t.Errorf("rivetctl hot --all: %s; want coordinatorActor main on %s with its turns", out, coord)
		}
	}
	if t.Failed() {
		t.Log(c.logs())
	}
}

// checkStatsAll runs rivetctl stats --all on n and checks that it lists
// every node of ids with partitions, and a total of partitions, owned
// among them.
func checkStatsAll(t *testing.T, n *nodeProc, ids []string, partitions int) {
	t.Helper()
	out, errOut, code := n.rivetctl("stats", "--all")
	if code != 0 {
		t.Fatalf("rivetctl stats --all: %q (stderr %q, exit %d)", out, errOut, code)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) == 6 {
			rows[f[0]] = f[1:]
		}
	}
	sum := 0
	for _, id := range ids {
		r, ok := rows[id]
		if !ok || r[4] == "0" {
			t.Errorf("rivetctl stats --all has no row for %s with partitions:\n%s", id, out)
			continue
		}
		p, _ := strconv.Atoi(r[4])
		sum += p
	}
	if total, ok := rows["total"]; !ok || total[4] != strconv.Itoa(partitions) || sum != partitions {
		t.Errorf("rivetctl stats --all: the nodes' partitions add up to %d, want %d, and a total row of them:\n%s", sum, partitions, out)
	}
}

// etcdLeader returns the name (node ID) of the etcd member that leads.
func (c *testCluster) etcdLeader() string {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.nodes[0].etcdC}, DialTimeout: 5 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, c.nodes[0].etcdC)
	if err != nil {
		c.t.Fatalf("etcd status: %v", err)
	}
	ms, err := cli.MemberList(ctx)
	if err != nil {
		c.t.Fatalf("etcd members: %v", err)
	}
	for _, m := range ms.Members {
		if m.ID == st.Leader {
			return m.Name
		}
	}
	return ""
}

// owners is a partition table as a lookup of who owns which actor.
type owners struct {
	count uint32
	by    map[uint32]string
}

func ownersOf(tab client.PartitionTable) owners {
	o := owners{count: tab.Count, by: map[uint32]string{}}
	for _, row := range tab.Owners {
		o.by[row.Partition] = row.Owner
	}
	return o
}

// of returns the owner of an actor with a one-component key.
func (o owners) of(name, key string) string {
	return o.by[placement.Partition(name, storage.EncodeKey([]string{key}), o.count)]
}

// key returns the first of prefix0, prefix1, ... whose owner (for actor
// name) satisfies ok.
func (o owners) key(t testing.TB, name, prefix string, ok func(owner string) bool) string {
	t.Helper()
	for i := range 10000 {
		if k := fmt.Sprintf("%s%d", prefix, i); ok(o.of(name, k)) {
			return k
		}
	}
	t.Fatalf("no %s key %s0..%s9999 has the owner wanted", name, prefix, prefix)
	return ""
}
