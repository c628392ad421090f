package placement

import (
	"fmt"
	"testing"
)

func TestPartitionStableAndSpread(t *testing.T) {
	// Stability: these values are stored facts of every cluster; a change
	// of hash would orphan stored actors.
	if got := Partition("counter", "main", 1024); got != Partition("counter", "main", 1024) {
		t.Fatalf("not deterministic")
	}
	if Partition("counter", "a", 1024) == Partition("counter", "a,", 1024) &&
		Partition("counter", "b", 1024) == Partition("counter", "b,", 1024) {
		t.Fatalf("suspiciously equal partitions for different keys")
	}
	const n = 64
	counts := make([]int, n)
	for i := range 64000 {
		counts[Partition("counter", fmt.Sprint(i), n)]++
	}
	for p, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("partition %d got %d of 64000 keys, want about 1000", p, c)
		}
	}
}
