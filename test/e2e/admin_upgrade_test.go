package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// In a rolling upgrade, the admin commands newer than the previous
// release (rivetctl log-level, actors --status retrying) name its node as
// one to upgrade, asked through a new node or directly, and still serve
// the new node: gRPC's "unknown method" read as a bug, and an old node's
// empty answer as no workflow retrying. The release is format2Release,
// from before those commands (upgradeFrom, since moved on, has them).
func TestNewAdminCommandsNameANodeOfThePreviousReleaseToUpgrade(t *testing.T) {
	old, _ := buildAt(t, format2Release)
	c := newClusterWith(t, 2, func(i int, n *nodeProc) {
		if i == 1 {
			n.bin = old
		}
	})
	oldNode, newNode := c.nodes[0], c.nodes[1]

	var out, errOut string
	var code int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, errOut, code = runRivetctl(t, bins.rivetctl, newNode.grpcAddr, "log-level", "--all")
		if strings.Contains(out, "node1") && strings.Contains(out, "node2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log-level --all never listed both nodes: exit %d, %q, %q", code, out, errOut)
		}
	}
	table := regexp.MustCompile(`^NODE   LEVEL\nnode1  no answer: failed precondition: node node1 does not support log-level \((an older build|it runs rivet [^)]*)\); upgrade it \(FAILED_PRECONDITION node\.unsupported\)\nnode2  info$`)
	if code != 1 || !table.MatchString(out) || errOut != "rivetctl: 1 of 2 nodes did not answer" {
		t.Errorf("log-level --all through the new node: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	out, errOut, code = runRivetctl(t, bins.rivetctl, oldNode.grpcAddr, "log-level")
	if want := "rivetctl: failed precondition: the node at " + oldNode.grpcAddr + " does not support log-level (it is older than it); upgrade it (FAILED_PRECONDITION node.unsupported)"; code != 1 || out != "" || errOut != want {
		t.Errorf("log-level at the old node: exit %d, %q, %q; want exit 1, %q", code, out, errOut, want)
	}
	out, errOut, code = runRivetctl(t, bins.rivetctl, newNode.grpcAddr, "log-level", "debug", "--node", "node2", "--for", "1m")
	if code != 0 || !strings.HasPrefix(out, "node node2: info -> debug until ") {
		t.Errorf("log-level debug of the new node: exit %d, %q, %q", code, out, errOut)
	}

	out, errOut, code = runRivetctl(t, bins.rivetctl, newNode.grpcAddr, "actors", "--status", "retrying")
	if code != 1 || out != "no workflows retrying a step" ||
		!strings.Contains(errOut, "rivetctl: note: node node1: failed precondition: node node1 does not list retrying workflows (it, or the node asked through, is older than it); upgrade it (FAILED_PRECONDITION node.unsupported)\n") ||
		!strings.HasSuffix(errOut, "rivetctl: 1 of 2 nodes did not answer") {
		t.Errorf("actors --status retrying through the new node: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}
