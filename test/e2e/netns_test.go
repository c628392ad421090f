package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is a set of network namespaces on one bridge: a host each, with
// its own address, that the test can cut off from the others (and from
// this process) and reconnect.
type netLab struct {
	t      *testing.T
	id     string
	bridge string
	subnet string // a.b.c of the /24
	hosts  int
	// iptables is set when a FORWARD rule was added for the bridge.
	iptables bool
}

// newNetLab makes hosts namespaces, or skips the test with the reason
// when this machine does not allow it (it needs root and iproute2).
func newNetLab(t *testing.T, hosts int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces (ip netns); run the tests as root to include it")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command for network namespaces")
	}
	l := &netLab{t: t, id: fmt.Sprintf("%04x", rand.IntN(1<<16)), hosts: hosts}
	l.bridge = "rvb" + l.id
	l.subnet = fmt.Sprintf("10.%d.%d", 100+rand.IntN(100), rand.IntN(250))
	t.Cleanup(l.remove)
	if out, err := exec.Command("ip", "netns", "add", l.ns(1)).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here: %v: %s", err, out)
	}
	l.setup("ip", "link", "add", l.bridge, "type", "bridge")
	// Frames between the bridge's ports go through iptables' FORWARD
	// chain (br_netfilter), whose policy Docker sets to DROP.
	if _, err := exec.LookPath("iptables"); err == nil {
		l.setup("iptables", "-I", "FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT")
		l.iptables = true
	}
	l.setup("ip", "addr", "add", l.subnet+".1/24", "dev", l.bridge)
	l.setup("ip", "link", "set", l.bridge, "up")
	for i := 1; i <= hosts; i++ {
		if i > 1 {
			l.setup("ip", "netns", "add", l.ns(i))
		}
		host, peer := fmt.Sprintf("rvh%s%d", l.id, i), fmt.Sprintf("rvp%s%d", l.id, i)
		l.setup("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
		l.setup("ip", "link", "set", host, "master", l.bridge)
		l.setup("ip", "link", "set", host, "up")
		l.setup("ip", "link", "set", peer, "netns", l.ns(i))
		l.setup("ip", "-n", l.ns(i), "addr", "add", l.addr(i)+"/24", "dev", peer)
		l.setup("ip", "-n", l.ns(i), "link", "set", peer, "up")
		l.setup("ip", "-n", l.ns(i), "link", "set", "lo", "up")
	}
	return l
}

func (l *netLab) ns(i int) string   { return fmt.Sprintf("rv%s-%d", l.id, i) }
func (l *netLab) addr(i int) string { return fmt.Sprintf("%s.%d", l.subnet, 10+i) }

// wrap is the command prefix that runs a program on host i.
func (l *netLab) wrap(i int) []string { return []string{"ip", "netns", "exec", l.ns(i)} }

// cut disconnects host i from the bridge: it reaches no one, and no one
// reaches it. heal reconnects it.
func (l *netLab) cut(i int)  { l.run("ip", "link", "set", fmt.Sprintf("rvh%s%d", l.id, i), "down") }
func (l *netLab) heal(i int) { l.run("ip", "link", "set", fmt.Sprintf("rvh%s%d", l.id, i), "up") }

func (l *netLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// setup runs one step of making the lab; a machine that refuses it (a
// container without the capabilities, say) skips the test, saying why.
func (l *netLab) setup(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Skipf("cannot make the network lab here: %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (l *netLab) remove() {
	for i := 1; i <= l.hosts; i++ {
		_ = exec.Command("ip", "netns", "del", l.ns(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
	if l.iptables {
		_ = exec.Command("iptables", "-D", "FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT").Run()
	}
}

func execCommandContext(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, args[0], args[1:]...)
}
