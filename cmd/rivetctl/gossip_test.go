package main

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// --addr at a node's gossip port (memberlist: TCP, not gRPC), which closes
// the connection as a TLS-only node does to a plaintext client, is told to
// be no gRPC port, with the node's gRPC port as the --addr to use; not
// that the node may serve TLS only, nor nothing at all with --tls.
func TestAnAddressAtAGossipPortSaysItIsNotGRPC(t *testing.T) {
	t.Parallel() // each command waits out its retries
	reg, err := rivet.Setup(rivet.Actor[chargeState]{Name: "idle", Run: func(*workflow.Ctx[chargeState]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	n := startLocalNode(t, reg)
	gossip := n.GossipAddr()
	want := "; " + gossip + " does not answer gRPC (a node's gossip port?): --addr takes a node's gRPC address, its --grpc-addr (port 6420 by default)\n"
	for _, args := range [][]string{{"members"}, {"--tls", "members"}} {
		r := rivetctl(t, gossip, append(args, "--timeout", "8s")...)
		if r.code != exitError || !strings.HasPrefix(r.stderr, "rivetctl: unavailable: ") || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("%v at the gossip port: exit %d, stderr %q; want UNAVAILABLE ending %q", args, r.code, r.stderr, want)
		}
	}
	// The gRPC port with --tls: a plaintext node, not a port without gRPC.
	r := rivetctl(t, n.GRPCAddr(), "--tls", "members", "--timeout", "8s")
	if r.code != exitError || strings.Contains(r.stderr, "does not answer gRPC") {
		t.Errorf("--tls at a plaintext node: exit %d, stderr %q", r.code, r.stderr)
	}
}
