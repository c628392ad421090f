package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// A negative IdleTimeout is refused, for the node and for an actor type:
// it meant the default without a word, where a Dapr or Orleans user may
// have meant "never". 0 is still the default.
func TestANegativeIdleTimeoutIsRefused(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[struct{}]{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := runtime.DefaultConfig()
	cfg.NodeID, cfg.Partitions = "n1", testPartitions
	cfg.IdleTimeout = -time.Second
	if _, err := runtime.New(cfg, reg, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "IdleTimeout is negative") {
		t.Errorf("New with IdleTimeout -1s: %v; want it refused as negative", err)
	}
	_, err = rivet.Setup(rivet.Actor[struct{}]{Name: "plain", Options: rivet.Options{IdleTimeout: -time.Second}})
	if err == nil || !strings.Contains(err.Error(), "actor plain: Options.IdleTimeout is negative") {
		t.Errorf("Setup with Options.IdleTimeout -1s: %v; want it refused as negative", err)
	}
}
