package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose gRPC port is secured unlike every live node's (here: no
// token, where the cluster's nodes want one) is refused, saying what
// differs, and takes no partition: a trial's plaintext node beside mTLS
// nodes took 28% of the partitions, which the others could not reach, and
// served them without a token. A node secured as they are joins.
func TestANodeSecuredUnlikeTheClusterIsRefused(t *testing.T) {
	old := securityWait
	securityWait = 500 * time.Millisecond
	defer func() { securityWait = old }()
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id, token string, join []string) Config {
		cfg := ClusterConfigForTest(t, id, endpoints, "/same-security-test/", parts, join)
		cfg.Token = token
		return cfg
	}
	a := StartForTest(t, ctx, config("a", "s3cret", nil), reg)
	awaitCond(t, ctx, "a to own the partitions", func() bool { return a.own.Owned() == parts })

	b, err := Start(ctx, config("b", "", []string{a.GossipAddr()}), reg)
	if err == nil {
		b.Stop(ctx)
		t.Fatal("a node without the cluster's token started")
	}
	if msg := err.Error(); !strings.Contains(msg, "node b secures its gRPC port as plaintext, but every live node of the cluster with more: plaintext+token (a)") || !strings.Contains(msg, "--token") {
		t.Fatalf("refused with %q; want what differs, and the flags to set", msg)
	}
	if n := a.own.Owned(); n != parts {
		t.Fatalf("a owns %d partitions after b was refused, want all %d", n, parts)
	}
	StartForTest(t, ctx, config("c", "s3cret", []string{a.GossipAddr()}), reg)
}

// Only a newcomer without what the live nodes have (TLS, client
// certificates, a token) is refused: one with more (mTLS beside TLS, a
// cluster switching to more at once) is not, so a misconfigured node that
// registered first cannot keep the others out.
func TestWhichSecurityIsWeaker(t *testing.T) {
	for _, c := range []struct {
		mine, theirs string
		weaker       bool
	}{
		{"plaintext", "mtls+token", true},
		{"plaintext", "tls", true},
		{"mtls", "mtls+token", true},
		{"tls", "mtls", true},
		{"mtls", "tls", false},
		{"tls+token", "mtls+token", true},
		{"mtls+token", "tls+token", false},
		{"mtls+token", "plaintext", false},
		{"plaintext+token", "plaintext", false},
		{"plaintext", "plaintext", false},
	} {
		if got := weaker(c.mine, c.theirs); got != c.weaker {
			t.Errorf("weaker(%s, %s) = %v, want %v", c.mine, c.theirs, got, c.weaker)
		}
	}
}
