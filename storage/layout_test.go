package storage

import (
	"fmt"
	"testing"
)

// Partition numbers in keys are padded as %05d pads them, whose order the
// stored keys already have.
func TestPartitionKeysArePadded(t *testing.T) {
	for _, p := range []uint32{0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 65535, 99999, 100000, 1<<32 - 1} {
		if got, want := OwnerKey(p), fmt.Sprintf("%s%05d", OwnersPrefix, p); got != want {
			t.Errorf("OwnerKey(%d) = %q, want %q", p, got, want)
		}
		if got, want := PartitionPrefix(p), fmt.Sprintf("%s%05d/", ActorsPrefix, p); got != want {
			t.Errorf("PartitionPrefix(%d) = %q, want %q", p, got, want)
		}
	}
}
