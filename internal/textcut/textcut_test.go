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

// Valid turns each byte that is not UTF-8 into U+FFFD, as encoding/json
// does, and leaves valid text as it is.
func TestValidReplacesEachBadByte(t *testing.T) {
	for s, want := range map[string]string{
		"abc":          "abc",
		"日本":           "日本",
		"a\xff\xfeb":   "a\uFFFD\uFFFDb",
		"\xe6\x97":     "\uFFFD\uFFFD", // 日 cut short
		"ok \uFFFD ok": "ok \uFFFD ok",
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %q, want %q", s, got, want)
		}
	}
}
