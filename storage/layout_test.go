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

// A format key names its format, and nothing else under the prefix passes
// for one (a node refuses to start on a format it finds there).
func TestFormatKeys(t *testing.T) {
	for _, f := range []int{1, 2, 3, 10, 123} {
		if got, ok := ParseFormatKey(FormatKey(f)); !ok || got != f {
			t.Errorf("ParseFormatKey(FormatKey(%d)) = %d, %v", f, got, ok)
		}
	}
	for _, k := range []string{FormatsPrefix, FormatsPrefix + "x", FormatsPrefix + "0", FormatsPrefix + "-3", "cluster/config", "3"} {
		if f, ok := ParseFormatKey(k); ok {
			t.Errorf("ParseFormatKey(%q) = %d, true", k, f)
		}
	}
}
