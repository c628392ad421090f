package storage

import (
	"fmt"
	"slices"
	"strings"
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

// fuzzKey makes an actor key of s: its components split at NUL (so that
// a key of any bytes, with '/', ',', '%', empty components, is reachable).
func fuzzKey(s string) []string { return strings.Split(s, "\x00") }

// EncodeKey is injective and DecodeKey inverts it: two actors' keys never
// share a storage key (one actor would read and overwrite the other's
// state), and an encoded key holds no '/', so no actor's prefix is a
// prefix of another's (a delete of one actor's keys would take the
// other's too). Keys with any bytes, '/', ',', '%', empty components.
func FuzzEncodeKey(f *testing.F) {
	f.Add("a", "b")
	f.Add("a,b", "a\x00b")
	f.Add("a%2Cb", "a,b")
	f.Add("", "\x00")
	f.Add("x/y", "x%2Fy")
	f.Add("%", "%25")
	f.Add("ü\xff", "\xff")
	f.Fuzz(func(t *testing.T, s1, s2 string) {
		k1, k2 := fuzzKey(s1), fuzzKey(s2)
		e1, e2 := EncodeKey(k1), EncodeKey(k2)
		if strings.Contains(e1, "/") {
			t.Fatalf("EncodeKey(%q) = %q holds a '/'", k1, e1)
		}
		d, err := DecodeKey(e1)
		if err != nil || !slices.Equal(d, k1) {
			t.Fatalf("DecodeKey(EncodeKey(%q)) = %q, %v", k1, d, err)
		}
		if e1 == e2 && !slices.Equal(k1, k2) {
			t.Fatalf("keys %q and %q both encode as %q", k1, k2, e1)
		}
		if p1, p2 := ActorPrefix(7, "n", e1), ActorPrefix(7, "n", e2); e1 != e2 && (strings.HasPrefix(p1, p2) || strings.HasPrefix(p2, p1)) {
			t.Fatalf("actor prefix %q and %q: one starts the other", p1, p2)
		}
	})
}

// DecodeKey reads any stored text without a panic, and what it reads
// encodes back to a key that reads the same: a node lists actors from
// keys in storage, which an operator's tool may have written.
func FuzzDecodeKey(f *testing.F) {
	for _, s := range []string{"a,b", "%2C%2F%25", "%", "%2", "a%zz", "%2c", ",", "", "%+1", "% 1", "%-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, enc string) {
		k, err := DecodeKey(enc)
		if err != nil {
			if k != nil {
				t.Fatalf("DecodeKey(%q) = %q and an error %v", enc, k, err)
			}
			return
		}
		if d, err := DecodeKey(EncodeKey(k)); err != nil || !slices.Equal(d, k) {
			t.Fatalf("DecodeKey(%q) = %q, which encodes as %q, read as %q, %v", enc, k, EncodeKey(k), d, err)
		}
	})
}
