package ijson

import (
	"encoding/json"
	"testing"
)

func TestLoneSurrogate(t *testing.T) {
	for _, tc := range []struct {
		in  string
		at  int
		esc string
	}{
		{`{"a":"b"}`, -1, ""},
		{`"\u00e9\n\\"`, -1, ""},
		{`"\ud83d\ude00"`, -1, ""},
		{`"\uD83D\uDE00"`, -1, ""},
		{`"\\ud800"`, -1, ""},   // a backslash, then text
		{`"\\\\ud800"`, -1, ""}, // two backslashes, then text
		{`["\ud800"]`, 2, `\ud800`},
		{`"\\\ud800"`, 3, `\ud800`}, // a backslash, then the escape
		{`"\udc00"`, 1, `\udc00`},
		{`"\ud800\u0041"`, 1, `\ud800`},
		{`"\ud800\ud800\udc00"`, 1, `\ud800`},
		{`"\ud83d\ude00\ude00"`, 13, `\ude00`},
		{`{"\udbff":1}`, 2, `\udbff`},
		{`"x\ud800\\udc00"`, 2, `\ud800`},
	} {
		if !json.Valid([]byte(tc.in)) {
			t.Fatalf("%s: not JSON", tc.in)
		}
		at, esc := LoneSurrogate([]byte(tc.in))
		if at != tc.at || esc != tc.esc {
			t.Errorf("%s: %d %q, want %d %q", tc.in, at, esc, tc.at, tc.esc)
		}
	}
}

// LoneSurrogate finds, in any valid JSON, the first escape of a lone
// surrogate, as a plain reading of its strings escape by escape finds
// it: one it misses is a payload whose text encoding/json silently turns
// into U+FFFD (a node takes it; an actor sees other text than was sent);
// one it makes up is a valid payload refused.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`"\ud800"`, `"\ud800\udc00"`, `"\\ud800"`, `"\\\ud800"`, `["\udc00\ud800", "\u005cud800"]`,
		`{"\ud83d\ude00":"\ud83d"}`, `"\uD800\uDBFF"`, `"\ud800\\udc00"`, `"x\u00e9\ud800"`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // the contract: b is valid JSON
		}
		at, esc := LoneSurrogate(b)
		wantAt := loneSurrogateRef(b)
		if at != wantAt {
			t.Fatalf("LoneSurrogate(%q) = %d, %q; want %d", b, at, esc, wantAt)
		}
		if at >= 0 && esc != string(b[at:at+6]) {
			t.Fatalf("LoneSurrogate(%q) = %d, %q: not the escape there", b, at, esc)
		}
	})
}

// loneSurrogateRef reads b's strings escape by escape.
func loneSurrogateRef(b []byte) int {
	inString := false
	pendingHigh := -1 // offset of a high surrogate escape just read
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch {
		case c == '"':
			if pendingHigh >= 0 {
				return pendingHigh
			}
			inString = false
		case c == '\\' && b[i+1] == 'u':
			r := hex4(b[i+2 : i+6])
			switch {
			case pendingHigh >= 0 && r >= 0xdc00 && r <= 0xdfff:
				pendingHigh = -1
			case pendingHigh >= 0:
				return pendingHigh
			case r >= 0xdc00 && r <= 0xdfff:
				return i
			case r >= 0xd800 && r < 0xdc00:
				pendingHigh = i
			}
			i += 5
		default:
			if pendingHigh >= 0 {
				return pendingHigh
			}
			if c == '\\' {
				i++ // a two-character escape
			}
		}
	}
	return -1
}
