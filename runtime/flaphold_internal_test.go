package runtime

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage"
)

// The first lease loss in a while registers again at once; each further
// one within flapWindow waits twice as long for storage to answer
// steadily, up to steadyMax; a loss after a quiet flapWindow starts over.
func TestFlapHoldGrowsWithRecentLosses(t *testing.T) {
	o := &Ownership{}
	t0 := time.Unix(1700000000, 0)
	var got []time.Duration
	for i := range 6 {
		_, hold := o.flapHold(t0.Add(time.Duration(i) * 10 * time.Second))
		got = append(got, hold)
	}
	want := []time.Duration{0, steadyBase, 2 * steadyBase, 4 * steadyBase, steadyMax, steadyMax}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("holds %v, want %v", got, want)
		}
	}
	if n, hold := o.flapHold(t0.Add(50*time.Second + flapWindow)); n != 1 || hold != 0 {
		t.Fatalf("a loss after a quiet window: %d recent, hold %v; want 1 and none", n, hold)
	}
}

// A lost lease's hold waits only if another node could take the
// partitions over: one registered, not draining, and this node's record
// no longer on the lost lease.
func TestOthersMayTakeOver(t *testing.T) {
	rec := func(r NodeRecord) storage.KV {
		b, _ := json.Marshal(r)
		return storage.KV{Key: storage.NodeKey(r.NodeID), Value: b}
	}
	o := &Ownership{}
	for _, c := range []struct {
		name string
		kvs  []storage.KV
		want bool
	}{
		{"alone", nil, false},
		{"another", []storage.KV{rec(NodeRecord{NodeID: "b", Lease: 9})}, true},
		{"only a draining one", []storage.KV{rec(NodeRecord{NodeID: "b", Lease: 9, Draining: true})}, false},
		{"own record on the lost lease", []storage.KV{rec(NodeRecord{NodeID: "a", Lease: 7}), rec(NodeRecord{NodeID: "b", Lease: 9})}, false},
		{"own record on another lease", []storage.KV{rec(NodeRecord{NodeID: "a", Lease: 8}), rec(NodeRecord{NodeID: "b", Lease: 9})}, true},
		{"garbage", []storage.KV{{Key: storage.NodeKey("x"), Value: []byte("{")}}, false},
	} {
		if got := o.othersMayTakeOver(c.kvs, "a", 7); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
