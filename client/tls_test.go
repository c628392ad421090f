package client_test

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// secured returns the server options of a node with mTLS and a token, and
// the certificate directory.
func secured(t *testing.T, token string) ([]grpc.ServerOption, string) {
	t.Helper()
	dir := t.TempDir()
	if err := certs.Generate(dir, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	cfg, err := certs.ServerConfig(f(certs.NodeFile), f(certs.NodeKeyFile), f(certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ChainUnaryInterceptor(server.AuthUnaryInterceptor(token)),
		grpc.ChainStreamInterceptor(server.AuthStreamInterceptor(token)),
	}, dir
}

// The token comes from WithToken or, without it, from $RIVET_TOKEN; a
// refusal is rivet.ErrUnauthenticated; the TLS files are checked by New.
func TestTokenAndTLS(t *testing.T) {
	opts, dir := secured(t, "t0k")
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{GRPCOptions: opts})
	tlsOpt := client.WithTLS(filepath.Join(dir, certs.CAFile), filepath.Join(dir, certs.ClientFile), filepath.Join(dir, certs.ClientKeyFile))
	noRetry := client.WithRetry(time.Millisecond, 0)

	t.Setenv(client.TokenEnv, "t0k")
	c := newClient(t, addr, tlsOpt, noRetry)
	if _, err := c.Members(ctx(t)); err != nil {
		t.Fatalf("token from the environment: %v", err)
	}
	for name, opt := range map[string]client.Option{"no token": client.WithToken(""), "wrong token": client.WithToken("t1k")} {
		c := newClient(t, addr, tlsOpt, opt, noRetry)
		_, err := c.Members(ctx(t))
		if !errors.Is(err, rivet.ErrUnauthenticated) || client.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}
	t.Setenv(client.TokenEnv, "")
	c = newClient(t, addr, tlsOpt, client.WithToken("t0k"), noRetry)
	if _, err := c.Actor("counter", "k").Call(ctx(t), "increment", 1); err != nil {
		t.Fatalf("WithToken: %v", err)
	}
	if ok, err := newClient(t, addr, tlsOpt, noRetry).Healthy(ctx(t)); err != nil {
		// servertest serves no health service: UNIMPLEMENTED shows the
		// call got past TLS and was not refused for want of a token.
		if client.Code(err) == codes.Unauthenticated || ok {
			t.Fatalf("health without a token: %v %v", ok, err)
		}
	}

	if _, err := client.New(addr, client.WithTLS(filepath.Join(dir, "missing.pem"), "", "")); err == nil {
		t.Error("New accepted a missing CA file")
	}
	if _, err := client.New(addr, client.WithToken("line\nbreak")); err == nil {
		t.Error("New accepted a token that cannot travel in metadata")
	}
}

// The direct router dials the owners with the client's credentials.
func TestDirectRoutingUsesTheCredentials(t *testing.T) {
	t.Setenv(client.TokenEnv, "")
	opts, dir := secured(t, "t0k")
	var atA, atB atomic.Int64
	aAddr := servertest.Start(t, countingFake("a", &atA), servertest.Config{GRPCOptions: opts})
	b := countingFake("b", &atB)
	b.MemberList = []runtime.Member{{NodeID: "a", GRPCAddr: aAddr, State: "alive"}}
	b.PartitionCount = 1
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}
	bAddr := servertest.Start(t, b, servertest.Config{GRPCOptions: opts})

	c := newClient(t, bAddr, client.WithDirectRouting(50*time.Millisecond), client.WithToken("t0k"),
		client.WithTLS(filepath.Join(dir, certs.CAFile), filepath.Join(dir, certs.ClientFile), filepath.Join(dir, certs.ClientKeyFile)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.GetOrCreate("counter", "k").Call(ctx(t), "x")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) == `"a"` {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still served by %s, want a (the owner, dialed directly)", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
