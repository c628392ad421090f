package node

import (
	"testing"

	"github.com/rivet-go/rivet/runtime"
)

// A join's values are committed apart from its record only while every
// registered node says it reads them: a node of an older build (no flag in
// its record) would replay them as zero values.
func TestJoinOutputsGoApartOnlyWhileEveryNodeReadsThem(t *testing.T) {
	newer := runtime.NodeRecord{NodeID: "a", StorageFormat: runtime.StorageFormat, JoinOutputsApart: true}
	older := runtime.NodeRecord{NodeID: "b", StorageFormat: runtime.StorageFormat}
	for _, c := range []struct {
		recs map[string]runtime.NodeRecord
		want bool
	}{
		{map[string]runtime.NodeRecord{"a": newer}, true},
		{map[string]runtime.NodeRecord{"a": newer, "b": older}, false},
		{map[string]runtime.NodeRecord{}, false},
	} {
		if got := allReadJoinOutputsApart(c.recs); got != c.want {
			t.Errorf("%v: %v, want %v", c.recs, got, c.want)
		}
	}
}
