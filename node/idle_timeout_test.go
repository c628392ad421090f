package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A negative Runtime.IdleTimeout is refused as the node starts, naming the
// flag, as --idle-timeout -5s is: it meant the default, 30 s, without a
// word, where a Dapr or Orleans user may have meant "never".
func TestANegativeIdleTimeoutIsRefusedAtStart(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[struct{}]{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := clusterConfig(t, "a", etcdtest.Start(t), "/idle/", eventParts, nil)
	cfg.Runtime.IdleTimeout = -5 * time.Second
	n, err := node.Start(ctx, cfg, reg)
	if n != nil {
		n.Stop(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "--idle-timeout") || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Start with IdleTimeout -5s: %v; want it refused, naming --idle-timeout as negative", err)
	}
}
