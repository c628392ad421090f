package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bins holds the binaries built once for the whole package.
var bins struct {
	dir      string
	node     string
	rivetctl string
}

// statSources stats every source file of the module. These tests run
// binaries built from the module, which go test's result cache cannot see;
// files the test process stats are part of its cache key, so a change to any
// of them makes go test run these tests again instead of replaying an old
// result.
func statSources(root string) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod" || d.Name() == "go.sum") {
			_, _ = os.Stat(path)
		}
		return nil
	})
}

var statOnce sync.Once

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rivet-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.node = filepath.Join(dir, "node")
	bins.rivetctl = filepath.Join(dir, "rivetctl")
	for out, pkg := range map[string]string{bins.node: "../../cmd/node", bins.rivetctl: "../../cmd/rivetctl"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port that was free (TCP and UDP) a moment
// ago. The etcd ports must be fixed across a node's restarts and the gossip
// ports known to every node before any starts, so they cannot be ":0". The
// port is drawn below Linux's ephemeral range (32768 and up), so that no
// outgoing connection of this machine can take it between this check and
// the node's bind. A port is never handed out twice by one test binary:
// a port is free here until its node binds it, so without that two nodes
// of one cluster could draw the same one (seen once: "bind: address
// already in use" from a node's gossip listener).
func freePort(t testing.TB) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if portsGiven[addr] {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		portsGiven[addr] = true
		return addr
	}
	t.Fatal("no free loopback port in 20000-31999")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[string]bool{}
)

// nodeProc is one node process. Its data dir and etcd ports outlive the
// process, so start can run it again after a kill.
type nodeProc struct {
	t       testing.TB
	dataDir string
	etcdC   string
	etcdP   string
	grpcFix string
	gossip  string
	extra   []string
	// bin is the node binary to run; empty for bins.node (this
	// checkout's). A rolling upgrade runs an older one first, the chaos
	// test one with a test actor more.
	bin string
	// wrap runs the node through a command, e.g. ip netns exec NS.
	wrap     []string
	env      []string // KEY=value, added to the process's environment
	logPath  string
	cmd      *exec.Cmd
	grpcAddr string
	done     chan struct{}
}

func newNode(t testing.TB, extra ...string) *nodeProc {
	// Within a test, where go test records the files the process uses.
	statOnce.Do(func() { statSources("../..") })
	n := &nodeProc{t: t, dataDir: t.TempDir(), etcdC: freePort(t), etcdP: freePort(t), grpcFix: freePort(t), gossip: freePort(t), extra: extra}
	n.logPath = filepath.Join(n.dataDir, "node.log")
	t.Cleanup(func() { n.kill() })
	return n
}

// start runs the node and waits until it logs that it serves.
func (n *nodeProc) start() {
	n.t.Helper()
	n.awaitServing(n.launch())
}

// launch starts the process and returns a channel that receives its gRPC
// address once it logs that it serves. Nodes of one etcd cluster must be
// launched together: none serves before a quorum of members runs.
func (n *nodeProc) launch() <-chan string {
	t := n.t
	t.Helper()
	args := append([]string{
		"--data-dir", n.dataDir, "--grpc-addr", n.grpcFix, "--http-addr", "-",
		"--etcd-client-addr", n.etcdC, "--etcd-peer-addr", n.etcdP, "--gossip-addr", n.gossip,
		"--log-format", "json", "--partitions", "64",
	}, n.extra...)
	bin := bins.node
	if n.bin != "" {
		bin = n.bin
	}
	cmd := exec.Command(bin, args...)
	if len(n.wrap) > 0 {
		cmd = exec.Command(n.wrap[0], append(append(n.wrap[1:len(n.wrap):len(n.wrap)], bin), args...)...)
	}
	if len(n.env) > 0 {
		cmd.Env = append(os.Environ(), n.env...)
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logf, io.MultiWriter(logf, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		pw.Close()
		close(n.done)
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				GRPC string `json:"grpc"`
			}
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "node serving" {
				addr <- line.GRPC
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return addr
}

// awaitServing waits for what launch returned.
func (n *nodeProc) awaitServing(addr <-chan string) {
	t := n.t
	t.Helper()
	select {
	case a := <-addr:
		n.grpcAddr = a
	case <-n.done:
		t.Fatalf("node exited before serving; log:\n%s", n.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("node did not serve within 60s; log:\n%s", n.log())
	}
}

// kill sends SIGKILL and waits for the process to end.
func (n *nodeProc) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}

// stop sends SIGTERM and waits for a clean exit.
func (n *nodeProc) stop() error {
	if n.cmd == nil {
		return nil
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("node did not stop within 30s of SIGTERM")
	}
	code := n.cmd.ProcessState.ExitCode()
	n.cmd = nil
	if code != 0 {
		return fmt.Errorf("node exited with code %d", code)
	}
	return nil
}

func (n *nodeProc) log() string {
	b, _ := os.ReadFile(n.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// rivetctl runs the CLI against the node and returns stdout, stderr and
// the exit code.
func (n *nodeProc) rivetctl(args ...string) (string, string, int) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.rivetctl, append([]string{"--addr", n.grpcAddr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("rivetctl: %v", err)
	}
	return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), code
}

// logTS is a node's log line's "ts" (an ISO 8601 time), in seconds since
// 1970.
type logTS float64

func (ts *logTS) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	t, err := time.Parse("2006-01-02T15:04:05.000Z0700", s)
	if err != nil {
		return err
	}
	*ts = logTS(float64(t.UnixNano()) / 1e9)
	return nil
}
