package runtime

import (
	"testing"
	"time"
)

// The failures of one step are logged at its first, then once per
// stepFailuresEvery, each line counting those not logged since; a
// failure for good always; other steps apart.
func TestStepFailLogRationsPerStep(t *testing.T) {
	var l stepFailLog
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		id      string
		at      time.Duration
		forGood bool
		logged  bool
		quiet   int
	}
	for i, s := range []step{
		{"a", 0, false, true, 0},
		{"a", 5 * time.Second, false, false, 0},
		{"b", 6 * time.Second, false, true, 0}, // another step (or actor)
		{"a", 10 * time.Second, false, false, 0},
		{"a", stepFailuresEvery, false, true, 2},
		{"a", stepFailuresEvery + time.Second, false, false, 0},
		{"a", stepFailuresEvery + 2*time.Second, true, true, 1},  // for good: always
		{"a", stepFailuresEvery + 3*time.Second, false, true, 0}, // a new run of it: first again
	} {
		logged, quiet := l.logged(s.id, t0.Add(s.at), s.forGood)
		if logged != s.logged || quiet != s.quiet {
			t.Errorf("%d: failure of %s at +%v (for good %v): logged %v, %d not logged before; want %v, %d", i, s.id, s.at, s.forGood, logged, quiet, s.logged, s.quiet)
		}
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
}
