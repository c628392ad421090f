package workflow

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// The loop's fast path for int states must give exactly what
// encoding/json gives (value, or an error by falling back to it): a replay
// decodes the recorded state with whichever path applies.
func TestIntLoopStateMatchesJSON(t *testing.T) {
	raws := []string{
		"0", "-0", "1", "-1", "42", "007", "-01", "+1", "1.0", "1e3", "1E3", " 1", "1 ", "null", `"1"`, "true",
		"999999999999999999", "-999999999999999999", "1000000000000000000", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "", "-", "12a", "1-2", "[1]",
	}
	for _, raw := range raws {
		t.Run(raw, func(t *testing.T) {
			checkIntDecode[int](t, raw)
			checkIntDecode[int64](t, raw)
			checkIntDecode[int32](t, raw) // not taken by the fast path
		})
	}
	for _, n := range []int64{0, 1, -1, 12345, math.MaxInt64, math.MinInt64} {
		checkIntEncode(t, int(n))
		checkIntEncode(t, n)
	}
	// The fast path is taken where it can be (else the test above would
	// pass with it switched off).
	var n int
	if !decodeIntState([]byte("-42"), &n) || n != -42 {
		t.Fatalf("decodeIntState(-42) into an int: %d, not taken", n)
	}
	if b, err := encodeIntState(nil, new(string)); b != nil || err != nil {
		t.Fatalf("encodeIntState of a string = %q, %v; want nil, nil (json's business)", b, err)
	}
}

func checkIntDecode[L any](t *testing.T, raw string) {
	t.Helper()
	var fast, slow L
	ok := decodeIntState([]byte(raw), &fast)
	var zero L
	if !ok && any(fast) != any(zero) {
		t.Fatalf("%T %q: not decoded but changed to %v", fast, raw, fast)
	}
	in := raw
	if in == "" {
		in = "null" // decodeInto reads no value as null
	}
	err := json.Unmarshal([]byte(in), &slow)
	if ok && (err != nil || any(fast) != any(slow)) {
		t.Fatalf("%T %q: fast path gave %v, json gives %v, %v", fast, raw, fast, slow, err)
	}
}

func checkIntEncode[L int | int64](t *testing.T, n L) {
	t.Helper()
	b, err := encodeIntState(nil, &n)
	want, _ := json.Marshal(n)
	if err != nil || string(b) != string(want) {
		t.Fatalf("%T %s: fast path gave %q, %v; json %q", n, strconv.FormatInt(int64(n), 10), b, err, want)
	}
	// Into the last state's buffer, as an iteration between checkpoints
	// encodes: the value alone, whatever the buffer held.
	if b, err := encodeIntState([]byte("-9223372036854775808")[:0], &n); err != nil || string(b) != string(want) {
		t.Fatalf("%T %s into a used buffer: fast path gave %q, %v; json %q", n, strconv.FormatInt(int64(n), 10), b, err, want)
	}
}

// A step's int value takes the same fast path (roundTrip): recorded as
// encoding/json records it, and returned as it decodes back.
func TestIntStepValueMatchesJSON(t *testing.T) {
	for _, n := range []int64{0, 1, -1, 12345, math.MaxInt64, math.MinInt64} {
		checkIntRoundTrip(t, int(n))
		checkIntRoundTrip(t, n)
	}
}

func checkIntRoundTrip[T int | int64](t *testing.T, n T) {
	t.Helper()
	back := T(7)
	b, err := roundTrip(n, &back)
	want, _ := json.Marshal(n)
	if err != nil || string(b) != string(want) || back != n {
		t.Fatalf("%T %d: recorded %q, %v, returns %d; json records %q", n, n, b, err, back, want)
	}
}
