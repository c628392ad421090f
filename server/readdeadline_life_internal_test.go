package server

import (
	"context"
	"math"
	"testing"
	"time"
)

// sweepsBy runs n sweeps of s by hand.
func sweepsBy(s *sweeper, n int) {
	for range n {
		s.sweep()
	}
}

// A timeout near math.MaxInt64 (a caller's "no bound" through
// RequestReadTimeout) keeps a tick of at most a second, and ticks enough
// to cover it: the rounding overflowed, the tick came out negative, and
// the sweeper dropped every stream at once.
func TestReadDeadlineHugeTimeout(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second/2, 1<<62 + 1} {
		sw := newSweeper(d, nil)
		if sw.tick <= 0 || sw.tick > maxSweepTick {
			t.Fatalf("timeout %v: tick %v", d, sw.tick)
		}
		if k := float64(sw.life - 1); k*float64(sw.tick) < float64(d) {
			t.Fatalf("timeout %v: %v ticks of %v fall short", d, k, sw.tick)
		}
	}
	sw := newSweeper(math.MaxInt64, nil)
	defer sw.timer.Stop()
	ctx := sw.withReadDeadline(context.Background())
	sweepsBy(sw, 100)
	if ctx.Err() != nil {
		t.Fatalf("a stream dropped by the 100th sweep under a timeout of %v", time.Duration(math.MaxInt64))
	}
}
