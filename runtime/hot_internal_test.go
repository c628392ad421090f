package runtime

import (
	"testing"
	"time"
)

// turnLoad's rate is over the window now and the one before it; a turn
// that began a little before the last one counted (turns beside a step
// take the lock in any order) loses no count.
func TestTurnLoadCountsRecentTurns(t *testing.T) {
	var l turnLoad
	t0 := time.Unix(0, 0).Add(100 * hotWindow) // a window's start
	for i := range 30 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		l.add(at, at.Add(-time.Millisecond))
	}
	// 30 turns in the first 3 s of the window.
	if rate, turns, waited, since := l.read(t0.Add(5 * time.Second)); turns != 30 || waited != 30*time.Millisecond || !since.Equal(t0) || rate != 30.0/5 {
		t.Fatalf("5 s in: rate %v, turns %d, waited %v, since %v; want 6/s (30 in the 5 s it has been in memory), 30, 30ms, %v", rate, turns, waited, since, t0)
	}
	// Into the next window: the 30 are the window before's.
	l.add(t0.Add(hotWindow), time.Time{})
	l.add(t0.Add(hotWindow-time.Microsecond), time.Time{}) // began first, in the window before, counted second
	if rate, turns, _, _ := l.read(t0.Add(hotWindow + 2*time.Second)); turns != 32 || rate != 32.0/12 {
		t.Fatalf("12 s in: rate %v, turns %d; want 32 over 12 s", rate, turns)
	}
	// Two windows on, without a turn: only the last window's 2 count.
	if rate, _, _, _ := l.read(t0.Add(2*hotWindow + 5*time.Second)); rate != 2.0/15 {
		t.Fatalf("25 s in: rate %v, want 2 over 15 s", rate)
	}
	// Three on: nothing recent.
	if rate, turns, _, _ := l.read(t0.Add(3*hotWindow + time.Second)); rate != 0 || turns != 32 {
		t.Fatalf("31 s in: rate %v, turns %d; want 0, 32", rate, turns)
	}
	// Read against a time a little before the last turn (HotActors reads
	// many actors against one now): its windows still count.
	if rate, _, _, _ := l.read(t0.Add(hotWindow - time.Millisecond)); rate == 0 {
		t.Fatal("read just before the window of the last turns: rate 0")
	}
	// A turn after a long quiet: the old windows are gone.
	l.add(t0.Add(5*hotWindow), time.Time{})
	if rate, _, _, _ := l.read(t0.Add(5*hotWindow + 5*time.Second)); rate != 1.0/15 {
		t.Fatalf("after a quiet: rate %v, want 1 over 15 s", rate)
	}
}
