package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// format2Release is a commit whose node writes and reads storage format 2
// at most, and checks the formats the cluster recorded (cluster/formats):
// upgradeFrom when format 3 came, kept here when upgradeFrom moves on.
const format2Release = "088d4ad226b3590071d9540abf2258bac4e04a7c"

// Once a cluster of this checkout's nodes has recorded storage format 3
// (a join's values apart from its record), a node of the previous release
// (format2Release) started against it, a rollback or a late joiner,
// refuses to start and says why, instead of replaying such joins' values
// as zero values.
func TestANodeOfFormat2RefusesAClusterThatWroteFormat3(t *testing.T) {
	old, _ := buildAt(t, format2Release)
	c := newClusterWith(t, 1, func(int, *nodeProc) {})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.nodes[0].etcdC}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := cli.Get(ctx, "/rivet/cluster/formats/3")
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cluster/formats/3 within 30s of the node serving: %v, %v\n%s", r, err, c.nodes[0].log())
		}
	}

	n := c.externalNode("older")
	n.bin = old
	addr := n.launch()
	select {
	case a := <-addr:
		t.Fatalf("a node of %s (format 2) served at %s on a cluster that wrote format 3", format2Release[:7], a)
	case <-n.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("a node of %s (format 2) neither served nor exited within 60s; log:\n%s", format2Release[:7], n.log())
	}
	if code := n.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(n.log(), "storage format 3") {
		t.Fatalf("the node of format 2 exited with code %d, want a failure naming storage format 3; log:\n%s", code, n.log())
	}
	n.cmd = nil
	// It did not register.
	r, err := cli.Get(ctx, "/rivet/nodes/older")
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the refused node's record: %v, %v", r, err)
	}
}
