package textcut

import (
	"encoding/json"
	"strings"
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
		{"abc", -1, ""},
		{"", -1, ""},
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

// Prefix of any text and any bound is a start of the text, within the
// bound, cut where a character starts, and as long as that allows: a cut
// error message or table column never grows past its room, never loses
// more than the last character, and stays UTF-8 (a proto string must be,
// or the whole message fails to marshal).
func FuzzPrefix(f *testing.F) {
	f.Add("aé", 2)
	f.Add("日本", 4)
	f.Add("\xff\xfe", 1)
	f.Add("a\xe6\x97", 2)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 {
			n = -n % (len(s) + 2) // callers pass a room, never less than 0
		}
		got := Prefix(s, n)
		if !strings.HasPrefix(s, got) || len(got) > n && got != s || len(s) <= n && got != s {
			t.Fatalf("Prefix(%q, %d) = %q", s, n, got)
		}
		// Text that is not UTF-8 may have no character start to cut at
		// ("\x85\x85\xa9"): it may lose more than its last character.
		if len(got) < len(s) && utf8.ValidString(s) {
			if !utf8.RuneStart(s[len(got)]) || len(got) < n-utf8.UTFMax+1 {
				t.Fatalf("Prefix(%q, %d) = %q: not cut at the last character start within the bound", s, n, got)
			}
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Prefix(%q, %d) = %q, not UTF-8", s, n, got)
		}
	})
}

// Valid of any text is UTF-8, the text itself if it was UTF-8, and
// otherwise what encoding/json writes for it: each byte that is not
// part of UTF-8 as U+FFFD, every other character kept.
func FuzzValid(f *testing.F) {
	f.Add("abc")
	f.Add("a\xffb\xe6\x97c")
	f.Add("\xed\xa0\x80")
	f.Fuzz(func(t *testing.T, s string) {
		got := Valid(s)
		if !utf8.ValidString(got) || utf8.ValidString(s) && got != s {
			t.Fatalf("Valid(%q) = %q", s, got)
		}
		var viaJSON string
		b, _ := json.Marshal(s)
		if err := json.Unmarshal(b, &viaJSON); err != nil || viaJSON != got {
			t.Fatalf("Valid(%q) = %q, encoding/json makes %q", s, got, viaJSON)
		}
	})
}
