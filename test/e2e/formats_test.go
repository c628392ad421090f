package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// format2Release is a commit whose node writes and reads storage format 2
// at most, and checks the formats the cluster recorded (cluster/formats):
// upgradeFrom when format 3 came, kept here when upgradeFrom moves on.
const format2Release = "088d4ad226b3590071d9540abf2258bac4e04a7c"

// format3Release is a commit whose node writes and reads storage format 3
// at most: a commit of format 3, and upgradeFrom since format 4 came.
const format3Release = "660074362f0b7cab576f2afe1d3e146bcea1f2ab"

// Once a cluster of this checkout's nodes has recorded storage format 3
// (a join's values apart from its record), a node of the previous release
// (format2Release) started against it, a rollback or a late joiner,
// refuses to start and says why, instead of replaying such joins' values
// as zero values.
func TestANodeOfFormat2RefusesAClusterThatWroteFormat3(t *testing.T) {
	olderBuildRefuses(t, format2Release, 3)
}

// The same for format 4 (a pending join's branch failures in entries of
// their own) and a node of format 3 (format3Release), which would run
// such failed branches again and fail the workflow on a divergence.
func TestANodeOfFormat3RefusesAClusterThatWroteFormat4(t *testing.T) {
	olderBuildRefuses(t, format3Release, 4)
}

// olderBuildRefuses starts a cluster of this checkout's node, waits until
// it records format, and then starts a node of release, which reads only
// the formats before it: that node must exit naming the format, without
// registering.
func olderBuildRefuses(t *testing.T, release string, format int) {
	t.Helper()
	old, _ := buildAt(t, release)
	c := newClusterWith(t, 1, func(int, *nodeProc) {})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.nodes[0].etcdC}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := fmt.Sprintf("/rivet/cluster/formats/%d", format)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := cli.Get(ctx, key)
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s of the node serving: %v, %v\n%s", key, r, err, c.nodes[0].log())
		}
	}

	n := c.externalNode("older")
	n.bin = old
	addr := n.launch()
	select {
	case a := <-addr:
		t.Fatalf("a node of %s (format %d) served at %s on a cluster that wrote format %d", release[:7], format-1, a, format)
	case <-n.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("a node of %s (format %d) neither served nor exited within 60s; log:\n%s", release[:7], format-1, n.log())
	}
	if want := fmt.Sprintf("storage format %d", format); n.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(n.log(), want) {
		t.Fatalf("the node of format %d exited with code %d, want a failure naming %s; log:\n%s", format-1, n.cmd.ProcessState.ExitCode(), want, n.log())
	}
	n.cmd = nil
	// It did not register.
	r, err := cli.Get(ctx, "/rivet/nodes/older")
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the refused node's record: %v, %v", r, err)
	}
}
