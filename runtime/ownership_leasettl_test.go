package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// hideGranted is a store that does not say what TTL it granted.
type hideGranted struct{ storage.Store }

// A node's registration gives its lease's TTL as storage granted it
// (rounded up to whole seconds, as etcd keeps it), which its peers wait
// out before they take a failing connection to it for a network fault:
// TTLs are set node by node. A store that does not say is taken to round
// as etcd does.
func TestANodesRecordGivesItsGrantedLeaseTTL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store storage.Store
	}{
		{"store says", storage.NewMemory()},
		{"store does not say", hideGranted{storage.NewMemory()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			own := runtime.NewOwnership(tc.store, runtime.NodeRecord{NodeID: "n1"}, 1500*time.Millisecond, nil)
			if err := own.Establish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			defer own.Resign(ctx)
			kv, err := tc.store.Get(ctx, storage.NodeKey("n1"))
			if err != nil {
				t.Fatal(err)
			}
			var rec runtime.NodeRecord
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.LeaseTTLMillis != 2000 {
				t.Fatalf("record gives a lease TTL of %d ms for a TTL of 1.5 s, want 2000 (granted)", rec.LeaseTTLMillis)
			}
		})
	}
}
