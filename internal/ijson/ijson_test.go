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
