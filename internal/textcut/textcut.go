// Package textcut cuts text to a size in bytes without splitting a
// character, for messages that must fit a bound (a stored error, a status
// on a stream, a column of a table).
package textcut

import "unicode/utf8"

// Prefix is the longest start of s of at most n bytes that ends on a
// character boundary (s itself if it is that short).
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
