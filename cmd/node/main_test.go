package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/runtime"
)

// A malformed RIVET_* value stops the node with a message naming it, before
// anything starts.
func TestMalformedEnvironmentIsRefused(t *testing.T) {
	t.Setenv("RIVET_LEASE_TTL", "five seconds")
	t.Setenv("RIVET_PARTITIONS", "-3")
	err := run([]string{"--data-dir", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "RIVET_LEASE_TTL") || !strings.Contains(err.Error(), "RIVET_PARTITIONS") {
		t.Fatalf("run = %v, want an error naming both variables", err)
	}
}

func TestUnknownFlagIsRefused(t *testing.T) {
	if err := run([]string{"--no-such-flag"}, io.Discard); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}

// TLS settings that would leave the port less secure than they ask, values
// the node cannot run with, or certificates that cannot be read, stop the
// node before it serves.
func TestSecurityFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Each error names the flags (the node's user has no Config
		// fields to go by).
		{[]string{"--tls-client-ca", "ca.pem"}, "(--tls-client-ca, --tls-ca) need TLS on (TLSCertFile and TLSKeyFile: --tls-cert, --tls-key)"},
		{[]string{"--tls-cert", "node.pem"}, "(--tls-cert, --tls-key) go together"},
		{[]string{"--tls-cert", "missing.pem", "--tls-key", "missing-key.pem"}, "missing.pem"},
		{[]string{"--etcd-ca", "ca.pem"}, "(--etcd-ca, --etcd-cert, --etcd-key) are for an external etcd (EtcdEndpoints: --etcd-endpoints)"},
		{[]string{"--etcd-cert", "c.pem", "--etcd-endpoints", "https://127.0.0.1:2379"}, "(--etcd-cert, --etcd-key) go together"},
		{[]string{"--token", "caf\u00e9"}, "(--token, RIVET_TOKEN) must be printable ASCII"},
		{[]string{"--lease-ttl", "500ms"}, "(--lease-ttl) under 1s"},
		{[]string{"--partitions", "70000"}, "(--partitions) above 65536"},
		{[]string{"--etcd-ca", "ca.pem", "--etcd-endpoints", "http://127.0.0.1:2379"}, "https://"},
	} {
		err := run(append([]string{"--data-dir", t.TempDir(), "--log-level", "error"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// mainOf runs the node's main on args as the process would, and returns
// its exit status and what it wrote to stderr.
func mainOf(args ...string) (int, string) {
	var stderr bytes.Buffer
	code := node.ExitStatus(&stderr, "node", run(args, &stderr))
	return code, stderr.String()
}

// Each error is written once: a startup error with one "node: " (it had
// two, "node: node: grpc listen: ..."), and a flag that does not parse on
// one line that points at -h. The whole usage after it (some 70 lines)
// scrolled the error out of sight and left the last flag's help at the
// bottom of the terminal, where it read as the complaint.
func TestErrorsAreWrittenOnce(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	code, out := mainOf("--data-dir", t.TempDir(), "--log-level", "error", "--grpc-addr", busy.Addr().String(), "--http-addr", "-", "--gossip-addr", "-")
	if want := "node: grpc listen: listen tcp " + busy.Addr().String() + ": bind: address already in use\n"; code != 1 || out != want {
		t.Errorf("a busy port: exit %d, stderr %q; want exit 1, %q", code, out, want)
	}
	code, out = mainOf("--data-dir", t.TempDir(), "--log-level", "error", "--tls-cert", "node.pem")
	if want := "node: TLSCertFile and TLSKeyFile (--tls-cert, --tls-key) go together\n"; code != 1 || out != want {
		t.Errorf("a lone --tls-cert: exit %d, stderr %q; want exit 1, %q", code, out, want)
	}
	// A stray argument is a command-line mistake, as a bad flag is.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "node: flag provided but not defined: -no-such-flag (node -h lists the flags)\n"},
		{[]string{"--lease-ttl", "five"}, `node: invalid value "five" for flag -lease-ttl: parse error (node -h lists the flags)` + "\n"},
		{[]string{"--max-call-depth", "-1"}, "node: invalid value -1 for flag -max-call-depth: negative (node -h lists the flags)\n"},
		{[]string{"--data-dir", "d", "stray"}, `node: unexpected argument "stray" (the node takes flags only; every flag after it would be ignored; a list is one argument: --join a:1,b:2) (node -h lists the flags)` + "\n"},
	} {
		if code, out = mainOf(tc.args...); code != 2 || out != tc.want {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2, stderr:\n%s", tc.args, code, out, tc.want)
		}
	}
	// -h still prints the usage, and exits 0.
	if code, out = mainOf("-h"); code != 0 || !strings.HasPrefix(out, "Usage of node:\n") || !strings.Contains(out, "RIVET_GRPC_ADDR") {
		t.Errorf("-h: exit %d, stderr:\n%s\nwant exit 0 and the usage", code, out)
	}
}

// --version prints the build, and the storage format it writes and reads,
// on stdout and exits 0 without starting a node: an operator in a rolling
// upgrade tells which node runs which build (a user trial found no way
// to), and whether it starts in a cluster (rivetctl members lists the
// formats recorded; an SRE's trial had no way but etcdctl).
func TestVersionPrintsTheBuild(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	err = run([]string{"--version", "--data-dir", t.TempDir()}, io.Discard)
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	format := fmt.Sprintf("storage format %d (reads formats 1 to %d)", runtime.StorageFormat, runtime.StorageFormat)
	if status := node.ExitStatus(io.Discard, "node", err); status != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "rivet ") || !strings.Contains(lines[0], "go1.") || lines[1] != format {
		t.Fatalf("exit status %d (%v), printed %q: want 0, the build, and %q", status, err, out, format)
	}
}
