package server

import (
	"context"
	"math"
	"net"
	"testing"
	"time"
)

// sweepsBy runs n sweeps of s by hand.
func sweepsBy(s *sweeper, n int) {
	for range n {
		s.sweep()
	}
}

// A stream is dropped by the sweep k+1 after the last one before it came,
// k being the ticks in the timeout: the first sweep after it may come at
// once (a stream that comes as the timer fires, or while a sweep runs),
// so only the k after that one make up the timeout; a sweep fewer would
// drop it up to a tick early. A stream that comes once the list has
// emptied and the timer stopped arms it again. The sweeps are run by
// hand, the timer set an hour off, so that the count does not hang on the
// machine's load.
func TestReadDeadlineDropsAfterTheWholeTimeout(t *testing.T) {
	dropped := make(chan net.Addr, 4)
	sw := newSweeper(10*time.Second, func(a net.Addr) { dropped <- a })
	const k = 10
	sw.tick = time.Hour
	defer sw.timer.Stop()
	sweepsBy(sw, 3) // a sweeper that has run before
	ctx := sw.withReadDeadline(context.Background())
	sweepsBy(sw, k) // the first may come at once: k-1 ticks after it, before d
	if err := ctx.Err(); err != nil {
		t.Fatalf("dropped by the sweep %d after it came, before the %d ticks of its timeout: %v", k, k, context.Cause(ctx))
	}
	sweepsBy(sw, 1)
	if context.Cause(ctx) != errRequestReadTimeout {
		t.Fatalf("not dropped by the sweep %d after it came (cause %v)", k+1, context.Cause(ctx))
	}
	select {
	case <-dropped:
	default:
		t.Fatal("the drop was not told")
	}
	if n, armed := sw.listLen(); n != 0 || armed {
		t.Fatalf("after the drop: %d watched, armed %v", n, armed)
	}
	ctx = sw.withReadDeadline(context.Background())
	if n, armed := sw.listLen(); n != 1 || !armed {
		t.Fatalf("a stream after the list emptied: %d watched, armed %v", n, armed)
	}
	sweepsBy(sw, k+1)
	if context.Cause(ctx) != errRequestReadTimeout {
		t.Fatalf("a stream after the list emptied not dropped (cause %v)", context.Cause(ctx))
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
