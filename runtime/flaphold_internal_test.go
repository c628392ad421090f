package runtime

import (
	"testing"
	"time"
)

// The first lease loss in a while registers again at once; each further
// one within flapWindow waits twice as long for storage to answer
// steadily, up to steadyMax; a loss after a quiet flapWindow starts over.
func TestFlapHoldGrowsWithRecentLosses(t *testing.T) {
	o := &Ownership{}
	t0 := time.Unix(1700000000, 0)
	var got []time.Duration
	for i := range 6 {
		_, hold := o.flapHold(t0.Add(time.Duration(i) * 10 * time.Second))
		got = append(got, hold)
	}
	want := []time.Duration{0, steadyBase, 2 * steadyBase, 4 * steadyBase, steadyMax, steadyMax}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("holds %v, want %v", got, want)
		}
	}
	if n, hold := o.flapHold(t0.Add(50*time.Second + flapWindow)); n != 1 || hold != 0 {
		t.Fatalf("a loss after a quiet window: %d recent, hold %v; want 1 and none", n, hold)
	}
}
