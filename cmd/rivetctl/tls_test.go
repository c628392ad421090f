package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// serveSecured serves a fake node as a node with mTLS and a token does:
// TLS requiring a client certificate signed by the CA in dir, the token
// checked on everything but health.
func serveSecured(t *testing.T, dir, token string) string {
	t.Helper()
	cfg, err := certs.ServerConfig(filepath.Join(dir, certs.NodeFile), filepath.Join(dir, certs.NodeKeyFile), filepath.Join(dir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ChainUnaryInterceptor(server.AuthUnaryInterceptor(token)),
		grpc.ChainStreamInterceptor(server.AuthStreamInterceptor(token)))
	server.New(servertest.NewFake()).Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

// rivetctl certs makes what a node with mTLS needs; with them and the
// token, from flags or the environment, rivetctl gets through; without the
// token it is refused UNAUTHENTICATED, without TLS it cannot connect, and
// health needs TLS but no token.
func TestCertsTLSAndToken(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	r := rivetctlEnv(t, map[string]string{}, "certs", "--out", dir, "--hosts", "localhost, 127.0.0.1")
	r.want(t, 0, "wrote "+filepath.Join(dir, "ca.pem")+", ca-key.pem, node.pem and node-key.pem (for localhost,127.0.0.1), client.pem and client-key.pem\n")
	for _, f := range []string{certs.CAFile, certs.CAKeyFile, certs.NodeFile, certs.NodeKeyFile, certs.ClientFile, certs.ClientKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	r = rivetctlEnv(t, map[string]string{}, "certs", "--out", dir)
	if r.code != exitError || !strings.Contains(r.stderr, "file exists") {
		t.Errorf("certs over existing files: exit %d, stderr %q; want exit 1, file exists", r.code, r.stderr)
	}
	rivetctlEnv(t, map[string]string{}, "certs", "--out", t.TempDir(), "--hosts", ",").wantErr(t, exitUsage, "rivetctl: --hosts names no host")
	jsonDir := filepath.Join(t.TempDir(), "c")
	rivetctlEnv(t, map[string]string{}, "-o", "json", "certs", "--out", jsonDir, "--hosts", "n1").want(t, 0,
		`{"dir":"`+jsonDir+`","files":["ca.pem","ca-key.pem","node.pem","node-key.pem","client.pem","client-key.pem"],"hosts":["n1"]}`+"\n")

	addr := serveSecured(t, dir, "t0k")
	tlsFlags := []string{"--addr", addr, "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "client.pem"), "--tls-key", filepath.Join(dir, "client-key.pem")}
	with := func(args ...string) []string { return append(append([]string{}, tlsFlags...), args...) }
	none := map[string]string{}

	rivetctlEnv(t, none, with("--token", "t0k", "call", "counter", "main", "increment", "5")...).want(t, 0, "5\n")
	rivetctlEnv(t, map[string]string{
		"RIVET_ENDPOINT": addr, "RIVET_TOKEN": "t0k", "RIVET_TLS_CA": filepath.Join(dir, "ca.pem"),
		"RIVET_TLS_CERT": filepath.Join(dir, "client.pem"), "RIVET_TLS_KEY": filepath.Join(dir, "client-key.pem"),
	}, "call", "counter", "main", "increment", "1").want(t, 0, "6\n")
	rivetctlEnv(t, none, with("call", "counter", "main", "increment", "5")...).
		wantErr(t, exitError, "rivetctl: unauthenticated: no bearer token (send metadata authorization: Bearer <token>) (UNAUTHENTICATED request.unauthenticated); the node requires a token: pass --token (or env RIVET_TOKEN)")
	rivetctlEnv(t, none, with("--token", "t1k", "members")...).
		wantErr(t, exitError, "rivetctl: unauthenticated: invalid bearer token (UNAUTHENTICATED request.unauthenticated); the token given (--token, or env RIVET_TOKEN) is not the node's")
	rivetctlEnv(t, none, with("-o", "json", "members")...).
		wantErr(t, exitError, `{"error":{"code":"UNAUTHENTICATED","reason":"request.unauthenticated","message":"no bearer token (send metadata authorization: Bearer \u003ctoken\u003e)","hint":"the node requires a token: pass --token (or env RIVET_TOKEN)"},"exit":1}`)
	rivetctlEnv(t, none, with("health")...).want(t, 0, "serving\n")

	// Plaintext to a TLS port: the node never answers. (The client's
	// retries give up before --timeout, with their last UNAVAILABLE; a
	// --timeout shorter than them ended a slow machine's run first, with
	// no hint.)
	r = rivetctlEnv(t, none, "--addr", addr, "--token", "t0k", "--timeout", "8s", "stats")
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "(UNAVAILABLE); the node may serve TLS only: pass --tls-ca") {
		t.Errorf("plaintext: exit %d, stdout %q, stderr %q; want a failure that hints at TLS", r.code, r.stdout, r.stderr)
	}
	// TLS without the client certificate mTLS requires: the handshake
	// fails (the message varies: "certificate required", a broken pipe).
	r = rivetctlEnv(t, none, "--addr", addr, "--tls-ca", filepath.Join(dir, "ca.pem"), "--token", "t0k", "--timeout", "8s", "stats")
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "(UNAVAILABLE); the node may require a client certificate") {
		t.Errorf("no client certificate: exit %d, stdout %q, stderr %q; want a failure that hints at the certificate", r.code, r.stdout, r.stderr)
	}
	rivetctlEnv(t, none, "--addr", addr, "--tls-cert", "client.pem", "stats").
		wantErr(t, exitUsage, "rivetctl: --tls-cert and --tls-key go together")
}

// A plaintext client's failure against a TLS-only node reads either way,
// depending on timing: both get the TLS hint, and only without TLS flags.
func TestConnectionHintForATLSOnlyNode(t *testing.T) {
	for _, msg := range []string{
		`connection error: desc = "error reading server preface: EOF"`,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:5->127.0.0.1:6: read: connection reset by peer"`,
	} {
		err := &rivet.Error{Kind: rivet.ErrUnavailable, Message: msg}
		plain := &app{addr: "127.0.0.1:6"}
		if got := plain.connectionHint(err); !strings.Contains(got, "the node may serve TLS only") {
			t.Errorf("%s: hint %q, want the TLS one", msg, got)
		}
		withCA := &app{addr: "127.0.0.1:6", tlsCA: "ca.pem"}
		if got := withCA.connectionHint(err); strings.Contains(got, "serve TLS only") {
			t.Errorf("%s with --tls-ca: hint %q", msg, got)
		}
	}
	// Another first frame that could not be read (a port that is not
	// HTTP/2 at all) is not blamed on TLS.
	err := &rivet.Error{Kind: rivet.ErrUnavailable, Message: `connection error: desc = "error reading server preface: http2: frame too large"`}
	if got := (&app{addr: "127.0.0.1:6"}).connectionHint(err); got != "" {
		t.Errorf("frame too large: hint %q, want none", got)
	}
}

// A --hosts entry that is neither an IP address nor a host name (a port
// left on, a mistyped address) is a usage error: it went into the node
// certificate as a DNS name no dial matches, and TLS failed only when
// nodes dialed each other. Nothing is written.
func TestCertsRefusesAHostNoDialMatches(t *testing.T) {
	for _, c := range []struct{ hosts, line string }{
		{"localhost,node1:6420", `rivetctl: --hosts: "node1:6420" has a port: name hosts without one (node1)`},
		{"[::1]:6420", `rivetctl: --hosts: "[::1]:6420" has a port: name hosts without one (::1)`},
		{"https://node1", `rivetctl: --hosts: "https://node1" is a URL: name its host alone`},
		{"10.0.0.256", `rivetctl: --hosts: "10.0.0.256" is not an IP address (nor a host name: a name is not all digits)`},
		{"bad host", `rivetctl: --hosts: "bad host" is neither an IP address nor a host name (letters, digits, '-' and '_', in labels between dots)`},
		{"node1..x", `rivetctl: --hosts: "node1..x" is neither an IP address nor a host name (letters, digits, '-' and '_', in labels between dots)`},
	} {
		dir := filepath.Join(t.TempDir(), "certs")
		rivetctlEnv(t, map[string]string{}, "certs", "--out", dir, "--hosts", c.hosts).wantErr(t, exitUsage, c.line)
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("--hosts %q: %s was made (%v)", c.hosts, dir, err)
		}
	}
	// What names a host still works.
	dir := t.TempDir()
	if r := rivetctlEnv(t, map[string]string{}, "certs", "--out", dir, "--hosts", "localhost,127.0.0.1,::1,node-1.rivet_net.local,*.nodes.example.com,10.0.0.1"); r.code != 0 {
		t.Errorf("valid hosts: %+v", r)
	}
}

// A --validity too short to use (1ns wrote certificates expired before
// any node could load them) is a usage error, and nothing is written; an
// hour, the clock skew certificates allow for at their start, is enough.
func TestCertsRefusesAValidityTooShort(t *testing.T) {
	for _, v := range []string{"1ns", "59m59s"} {
		dir := filepath.Join(t.TempDir(), "certs")
		rivetctlEnv(t, map[string]string{}, "certs", "--out", dir, "--validity", v).
			wantErr(t, exitUsage, "rivetctl: --validity "+v+" is too short: the minimum is 1h0m0s, the clock skew the certificates allow for (a shorter one can be expired before a node loads it); such as 720h for 30 days")
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("--validity %s: %s was made (%v)", v, dir, err)
		}
	}
	dir := t.TempDir()
	if r := rivetctlEnv(t, map[string]string{}, "certs", "--out", dir, "--validity", "1h"); r.code != 0 {
		t.Fatalf("--validity 1h: %+v", r)
	}
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.NodeFile), filepath.Join(dir, certs.NodeKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leaf.NotAfter.After(time.Now()) {
		t.Errorf("--validity 1h: the node certificate expired at %s", c.Leaf.NotAfter)
	}
}
