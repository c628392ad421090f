package server

import (
	"context"
	"net"
	"testing"
	"time"
)

// listLen is the number of streams s watches, and whether its timer is
// armed.
func (s *sweeper) listLen() (n int, armed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := s.head; c != nil; c = c.next {
		n++
	}
	return n, s.armed
}

// awaitIdle waits, 10 s at most, until s watches no stream and its timer
// is not armed; after says what its streams did before (for the failure).
func awaitIdle(t *testing.T, s *sweeper, after string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, armed := s.listLen()
		if n == 0 && !armed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after its streams %s, the sweeper still watches %d (armed %v)", after, n, armed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A stream that ends before its request is read (its context canceled by
// gRPC as the stream ends, never disarmed) is forgotten by the sweeper
// within a tick, and the sweeper's timer is not armed again once it
// watches nothing: before, a stream's timer held its context, headers and
// all, for the whole timeout after the stream was gone.
func TestReadDeadlineForgetsEndedStreams(t *testing.T) {
	sw := newSweeper(time.Hour, nil)
	if sw.tick != time.Second {
		t.Fatalf("tick of a 1 h timeout: %v, want 1s", sw.tick)
	}
	const streams = 100
	var ends []context.CancelFunc
	for range streams {
		stream, end := context.WithCancel(context.Background())
		defer end()
		sw.withReadDeadline(stream)
		ends = append(ends, end)
	}
	if n, armed := sw.listLen(); n != streams || !armed {
		t.Fatalf("after %d streams: %d watched, armed %v", streams, n, armed)
	}
	for _, end := range ends {
		end()
	}
	start := time.Now()
	awaitIdle(t, sw, "ended")
	t.Logf("ended streams forgotten after %v", time.Since(start).Round(time.Millisecond))
}

// A stream disarmed (its request read) leaves the sweeper at once, and
// is never dropped, whichever of the list's places it held; the others
// are dropped, with errRequestReadTimeout as their cause, not before the
// timeout and at most about a tick after it.
func TestReadDeadlineDisarmAndDrop(t *testing.T) {
	const d = 100 * time.Millisecond
	dropped := make(chan struct{}, 10)
	sw := newSweeper(d, func(net.Addr) { dropped <- struct{}{} })
	if sw.tick != 10*time.Millisecond || sw.life != 11 {
		t.Fatalf("100 ms timeout: tick %v, life %d; want 10ms, 11", sw.tick, sw.life)
	}
	start := time.Now()
	var ctxs []context.Context
	for range 6 {
		ctxs = append(ctxs, sw.withReadDeadline(context.Background()))
	}
	// The head, one in the middle and the tail.
	for _, i := range []int{0, 3, 5} {
		disarmRead(context.WithValue(ctxs[i], struct{}{}, i)) // as an interceptor sees it
		disarmRead(ctxs[i])                                   // twice: nothing more
	}
	if n, _ := sw.listLen(); n != 3 {
		t.Fatalf("after 3 of 6 disarmed, %d watched, want 3", n)
	}
	for _, i := range []int{1, 2, 4} {
		select {
		case <-ctxs[i].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d not dropped within 10 s", i)
		}
		if took := time.Since(start); took < d {
			t.Fatalf("stream %d dropped after %v, before the timeout %v", i, took, d)
		}
		if cause := context.Cause(ctxs[i]); cause != errRequestReadTimeout {
			t.Fatalf("stream %d dropped with %v, want errRequestReadTimeout", i, cause)
		}
	}
	t.Logf("dropped after %v (timeout %v, tick %v)", time.Since(start).Round(time.Millisecond), d, sw.tick)
	for _, i := range []int{0, 3, 5} {
		if ctxs[i].Err() != nil {
			t.Fatalf("disarmed stream %d canceled: %v", i, context.Cause(ctxs[i]))
		}
	}
	for range 3 {
		select {
		case <-dropped:
		case <-time.After(10 * time.Second):
			t.Fatal("a drop was not told within 10 s")
		}
	}
	awaitIdle(t, sw, "were disarmed or dropped")
	if len(dropped) != 0 {
		t.Fatalf("%d drops told more than the 3 streams dropped", len(dropped))
	}
}

// Options left nil (a caller's optional hook unset) change nothing: the
// default bound stays, and a drop with no one to tell still drops.
func TestAuthOptionsNil(t *testing.T) {
	o := newAuthOptions([]AuthOption{nil, OnRequestReadTimeout(nil), RequestReadTimeout(0)})
	if o.readTimeout != requestReadTimeout || o.onReadTimeout != nil {
		t.Fatalf("options of nils: %+v, want the default bound %v and no hook", o, requestReadTimeout)
	}
	ctx := newSweeper(time.Millisecond, o.onReadTimeout).withReadDeadline(context.Background())
	select {
	case <-ctx.Done():
		if context.Cause(ctx) != errRequestReadTimeout {
			t.Fatalf("dropped with %v, want errRequestReadTimeout", context.Cause(ctx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read deadline of 1 ms without a hook did not drop within 10 s")
	}
}

// BenchmarkReadDeadline measures what the request read timeout adds to a
// stream that goes well, as gRPC and the interceptors drive it: the tap
// handle's context on the stream's (cancelable, as gRPC's is), its Done
// taken, the deadline disarmed as the request is read, the stream ended.
func BenchmarkReadDeadline(b *testing.B) {
	sw := newSweeper(requestReadTimeout, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			stream, end := context.WithCancel(context.Background())
			ctx := sw.withReadDeadline(stream)
			_ = ctx.Done()
			disarmRead(ctx)
			end()
		}
	})
}
