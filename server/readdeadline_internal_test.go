package server

import (
	"context"
	"testing"
	"time"
)

// A stream that ends before its request is read (its context canceled by
// gRPC as the stream ends, never disarmed) has its read deadline's timer
// stopped: before, the timer held the stream's context, headers and all,
// for the whole timeout after the stream was gone.
func TestReadDeadlineStopsWithItsStream(t *testing.T) {
	stream, end := context.WithCancel(context.Background())
	ctx := withReadDeadline(stream, time.Hour, nil)
	tm := ctx.Value(readDeadlineKey{}).(readDeadline).timer
	defer tm.Stop()
	end()
	// Reset says whether the timer was still pending (and arms it again
	// for an hour, which the next round or the deferred Stop undoes).
	deadline := time.Now().Add(10 * time.Second)
	for tm.Reset(time.Hour) {
		if time.Now().After(deadline) {
			t.Fatal("the read deadline's timer still runs 10 s after its stream ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Options left nil (a caller's optional hook unset) change nothing: the
// default bound stays, and a drop with no one to tell still drops.
func TestAuthOptionsNil(t *testing.T) {
	o := newAuthOptions([]AuthOption{nil, OnRequestReadTimeout(nil), RequestReadTimeout(0)})
	if o.readTimeout != requestReadTimeout || o.onReadTimeout != nil {
		t.Fatalf("options of nils: %+v, want the default bound %v and no hook", o, requestReadTimeout)
	}
	ctx := withReadDeadline(context.Background(), time.Millisecond, o.onReadTimeout)
	select {
	case <-ctx.Done():
		if context.Cause(ctx) != errRequestReadTimeout {
			t.Fatalf("dropped with %v, want errRequestReadTimeout", context.Cause(ctx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read deadline of 1 ms without a hook did not drop within 10 s")
	}
}
