package workflow

import (
	"testing"
	"time"
)

// TestMergeWakeTieKeepsFixedReason checks that of two equal deadlines the
// merge keeps the same reason whichever thread waited first (retry, then
// receive, then sleep), so that a listing of sleeping workflows does not
// say one thing or another by chance; an earlier deadline wins whatever
// its reason, and the queues are the union.
func TestMergeWakeTieKeepsFixedReason(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reasons := []string{WakeRetry, WakeReceive, WakeSleep}
	for i, x := range reasons {
		for _, y := range reasons[i:] {
			for _, pair := range [][2]string{{x, y}, {y, x}} {
				got := mergeWake(Wake{At: at, AtReason: pair[0]}, Wake{At: at, AtReason: pair[1]})
				if got.AtReason != x || !got.At.Equal(at) {
					t.Errorf("mergeWake(%s, %s) = %s at %v, want %s at %v", pair[0], pair[1], got.AtReason, got.At, x, at)
				}
			}
		}
	}
	got := mergeWake(Wake{At: at, AtReason: WakeRetry, Queues: []string{"b"}}, Wake{At: at.Add(-time.Millisecond), AtReason: WakeSleep, Queues: []string{"a"}})
	if got.AtReason != WakeSleep || !got.At.Equal(at.Add(-time.Millisecond)) || len(got.Queues) != 2 {
		t.Errorf("earlier sleep: got %+v", got)
	}
	got = mergeWake(Wake{Queues: []string{"q"}}, Wake{At: at, AtReason: WakeReceive})
	if got.AtReason != WakeReceive || !got.At.Equal(at) {
		t.Errorf("no deadline and a receive's: got %+v", got)
	}
}
