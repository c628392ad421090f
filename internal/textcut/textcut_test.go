package textcut

import (
	"testing"
	"unicode/utf8"
)

// A cut never splits a character, and keeps as much as fits.
func TestPrefixCutsOnACharacter(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"}, // é is 2 bytes: it does not fit
		{"aé", 3, "aé"},
		{"日本", 4, "日"},
		{"日本", 2, ""},
		{"abc", 0, ""},
	} {
		got := Prefix(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Prefix(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
