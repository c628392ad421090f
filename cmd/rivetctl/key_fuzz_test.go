package main

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// A key as rivetctl prints it (actors, inspect) reads back, given as
// KEY, as the same key, and prints without a character that does not
// print: an operator pastes the KEY column into the next command, and a
// key that read back as another would act on another actor (or create
// one). Any KEY argument is taken or refused as a usage error, never a
// panic, and a key taken prints as a KEY that reads back as it.
func FuzzKeyArgument(f *testing.F) {
	for _, s := range []string{"main", `["tenant","42"]`, `[""]`, "-x", "[x", "a b", "\u200b", "a\u200db", "\U000e0001", "\x1b[2J", "é\u2028", `["\ud83d\ude00"]`, `[null]`, `[]`, "\xff", `"a"`, " a "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// As a stored key: components split at NUL.
		if key := strings.Split(s, "\x00"); utf8.ValidString(s) {
			out := formatKey(key)
			if at := printableAt(out, false); at >= 0 {
				t.Fatalf("key %q prints as %q, which does not print at byte %d", key, out, at)
			}
			back, err := parseKey(out)
			if err != nil || !slices.Equal(back, key) {
				t.Fatalf("key %q prints as %q, which reads as %q, %v", key, out, back, err)
			}
		}
		// As a KEY argument.
		key, err := parseKey(s)
		if err != nil {
			if _, ok := err.(*usageError); !ok {
				t.Fatalf("KEY %q: %v (%T), not a usage error", s, err, err)
			}
			return
		}
		for i, c := range key {
			if !utf8.ValidString(c) {
				t.Fatalf("KEY %q read as %q: component %d is not UTF-8", s, key, i)
			}
		}
		if back, err := parseKey(formatKey(key)); err != nil || !slices.Equal(back, key) {
			t.Fatalf("KEY %q read as %q, which prints as %q, read as %q, %v", s, key, formatKey(key), back, err)
		}
	})
}
