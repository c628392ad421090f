// Package textcut cuts text to a size in bytes without splitting a
// character, for messages that must fit a bound (a stored error, a status
// on a stream, a column of a table).
package textcut

import "unicode/utf8"

// Prefix is the longest start of s of at most n bytes that ends on a
// character boundary (s itself if it is that short; "" if n < 0, a
// bound computed as what is left of a budget already spent).
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Valid is s with each byte that is not part of UTF-8 as U+FFFD, as
// encoding/json and gRPC's status message write it: the text of an error
// an actor's code made (from bytes, say) may be anything, and a proto
// string must be UTF-8, or its whole message does not marshal.
func Valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]rune, 0, len(s))
	for _, r := range s {
		b = append(b, r)
	}
	return string(b)
}
