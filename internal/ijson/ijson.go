// Package ijson checks what I-JSON (RFC 7493) asks of JSON text beyond
// RFC 8259 and encoding/json does not: no escape of a lone surrogate.
package ijson

import (
	"bytes"
	"fmt"
)

// LoneSurrogate returns the offset in b of the first escape of a lone
// surrogate ("\ud800" without a "\udc00".."\udfff" after it, or a low one
// without a high one before it), and the escape; -1 if b has none. b must
// be valid JSON (json.Valid): its backslashes are then all in strings, and
// each \u is followed by four hex digits.
//
// encoding/json decodes such an escape as U+FFFD without a word, and other
// decoders refuse it or keep it as it is: a payload would change meaning on
// the way. The check is for every payload a node takes, so it costs one
// bytes.Index for a payload without `\u`, the common case.
func LoneSurrogate(b []byte) (int, string) {
	i := bytes.Index(b, []byte(`\u`))
	if i < 0 {
		return -1, ""
	}
	for i >= 0 && i+6 <= len(b) {
		// The \ escapes only if an even number of backslashes come
		// before it: "\\u" is a backslash and a u.
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		next := i + 2
		if n%2 == 0 {
			r := hex4(b[i+2 : i+6])
			next = i + 6
			switch {
			case r >= 0xd800 && r < 0xdc00:
				if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return i, string(b[i : i+6])
				}
				if lo := hex4(b[i+8 : i+12]); lo < 0xdc00 || lo > 0xdfff {
					return i, string(b[i : i+6])
				}
				next = i + 12
			case r >= 0xdc00 && r <= 0xdfff:
				return i, string(b[i : i+6])
			}
		}
		k := bytes.Index(b[next:], []byte(`\u`))
		if k < 0 {
			return -1, ""
		}
		i = next + k
	}
	return -1, ""
}

// hex4 is the value of four hex digits, -1 if they are not.
func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		v = v<<4 | int(c)
	}
	return v
}

// LoneSurrogateText says what is wrong with the lone surrogate escape esc at
// byte at, after "<payload> is not" (or "are not"), for error messages.
func LoneSurrogateText(esc string, at int) string {
	return fmt.Sprintf("not I-JSON (RFC 7493): %s at byte %d is a lone surrogate (half of a UTF-16 pair without its other half), which a decoder would turn into U+FFFD", esc, at)
}
