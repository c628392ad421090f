package runtime

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The failures of one step are logged at its first, then once per
// stepFailuresEvery, each line counting those not logged since; its
// failures for good the same, apart; other steps apart.
func TestStepFailLogRationsPerStep(t *testing.T) {
	var l stepFailLog
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		key     string
		at      time.Duration
		forGood bool
		logged  bool
		quiet   int
	}
	for i, s := range []step{
		{"a", 0, false, true, 0},
		{"a", 5 * time.Second, false, false, 0},
		{"b", 6 * time.Second, false, true, 0}, // another step (or actor type)
		{"a", 10 * time.Second, false, false, 0},
		{"a", 11 * time.Second, true, true, 2}, // its first failure for good
		{"a", 12 * time.Second, true, false, 0},
		{"a", stepFailuresEvery, false, true, 1},
		{"a", stepFailuresEvery + time.Second, false, false, 0},
		{"a", stepFailuresEvery + 12*time.Second, true, true, 1},
	} {
		logged, quiet := l.logged(s.key, t0.Add(s.at), s.forGood)
		if logged != s.logged || quiet != s.quiet {
			t.Errorf("%d: failure of %s at +%v (for good %v): logged %v, %d not logged before; want %v, %d", i, s.key, s.at, s.forGood, logged, quiet, s.logged, s.quiet)
		}
	}
}

// A step's key leaves out its loops' iteration numbers: a polling loop's
// failing step, in every iteration and every actor of its type, is one.
func TestStepFailKeyCountsALoopsIterationsAsOne(t *testing.T) {
	for path, want := range map[string]string{
		"charge-card":                "order\x00charge-card",
		"charge-loop/~3/charge-card": "order\x00charge-loop/~/charge-card",
		"poll/~12/a/~0/b":            "order\x00poll/~/a/~/b",
		"~x/~":                       "order\x00~x/~",
	} {
		if got := stepFailKey("order", path); got != want {
			t.Errorf("stepFailKey(order, %q) = %q, want %q", path, got, want)
		}
	}
}

// An error in a log line is cut in its middle: its start and its cause.
func TestCutLoggedErrorKeepsBothEnds(t *testing.T) {
	msg := "POST https://pay.example/charge: " + strings.Repeat("é", 4000) + ": connection refused"
	got := cutLoggedError(msg)
	if len(got) > maxLoggedError+8 || !strings.HasPrefix(got, "POST https://pay.example/charge: ") || !strings.HasSuffix(got, ": connection refused") || !utf8.ValidString(got) {
		t.Fatalf("cut error (%d bytes): %.80q ... %.80q; want at most about %d bytes, both ends, valid UTF-8", len(got), got, got[len(got)-80:], maxLoggedError)
	}
	if short := "boom"; cutLoggedError(short) != short {
		t.Fatal("a short error was cut")
	}
}

// The marks are pruned once they are many, of those that no longer hold
// a line back.
func TestStepFailLogPrunes(t *testing.T) {
	var l stepFailLog
	t0 := time.Unix(1_800_000_000, 0)
	for i := range maxStepFailMarks {
		l.logged(string(rune('a'+i%26))+string(rune(i)), t0, false)
	}
	l.logged("late", t0.Add(stepFailuresEvery), false)
	if n := len(l.marks); n != 1 {
		t.Fatalf("%d marks after a prune, want 1 (the late one)", n)
	}
	// Many at once, none old enough to prune: dropped, map and all.
	for i := range maxStepFailMarks + 1 {
		l.logged(strconv.Itoa(i), t0.Add(3*stepFailuresEvery), false)
	}
	if n := len(l.marks); n > maxStepFailMarks {
		t.Fatalf("%d marks kept, want at most %d", n, maxStepFailMarks)
	}
}
