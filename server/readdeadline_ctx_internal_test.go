package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
)

type ctxKey struct{}

// The context a tap handle returns is the stream's for gRPC, the
// interceptors and the handler, and is no context package type: it must
// answer as its parent does (values, deadline, the parent's end and its
// cause), and let contexts derived from it find its cancelCtx (Value of
// the context package's key), or each would watch it with a goroutine and
// context.Cause would not give a drop's cause.
func TestReadDeadlineContextIsTheStreams(t *testing.T) {
	sw := newSweeper(50*time.Millisecond, nil)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	dl := time.Now().Add(time.Hour)
	parent, cancelParent := context.WithDeadline(peer.NewContext(context.WithValue(context.Background(), ctxKey{}, "v"), &peer.Peer{Addr: addr}), dl)
	defer cancelParent()
	ctx := sw.withReadDeadline(parent)
	if ctx.Value(ctxKey{}) != "v" {
		t.Fatal("a value of the parent not found")
	}
	if p, ok := peer.FromContext(ctx); !ok || p.Addr != addr {
		t.Fatal("the peer not found")
	}
	if s := fmt.Sprint(ctx); !strings.HasSuffix(s, ".WithCancel.WithReadDeadline") {
		t.Fatalf("printed as %q", s)
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(dl) {
		t.Fatalf("deadline %v %v, want %v", d, ok, dl)
	}
	g := runtime.NumGoroutine()
	var children []context.Context
	for range 100 {
		c, cancel := context.WithCancel(context.WithValue(ctx, ctxKey{}, "w"))
		defer cancel()
		children = append(children, c)
	}
	if n := runtime.NumGoroutine(); n > g+5 {
		t.Fatalf("100 contexts derived cost %d goroutines", n-g)
	}
	if children[0].Value(readDeadlineKey{}) != ctx {
		t.Fatal("a derived context does not find its stream's read deadline")
	}
	<-children[99].Done()
	if !errors.Is(children[99].Err(), context.Canceled) || context.Cause(children[99]) != errRequestReadTimeout || context.Cause(ctx) != errRequestReadTimeout {
		t.Fatalf("derived: %v / %v; stream: %v", children[99].Err(), context.Cause(children[99]), context.Cause(ctx))
	}
	if parent.Err() != nil {
		t.Fatal("the drop canceled the parent")
	}

	// Ended by its parent: the parent's cause, and no drop.
	parent2, end := context.WithCancelCause(context.Background())
	ctx2 := sw.withReadDeadline(parent2)
	bye := errors.New("bye")
	end(bye)
	<-ctx2.Done()
	if context.Cause(ctx2) != bye {
		t.Fatalf("cause %v, want the parent's", context.Cause(ctx2))
	}
}

// Streams that come, are disarmed, end or are left to the sweeper, from
// many goroutines at once while the sweeper runs every 100 µs (a disarm
// may lose to a drop here, as it may at the timeout): every stream left
// is dropped, every drop told once (the node counts and warns from it),
// and the list ends empty with the timer off; with -race, the lock is
// checked to cover the list and the streams' places in it.
func TestReadDeadlineConcurrentStreams(t *testing.T) {
	var told atomic.Int64
	sw := newSweeper(time.Millisecond, func(net.Addr) { told.Add(1) })
	const workers, each = 16, 500
	var dropped, left atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				stream, end := context.WithCancel(context.Background())
				ctx := sw.withReadDeadline(stream)
				switch rand.IntN(4) {
				case 0:
					disarmRead(ctx)
				case 1:
					end()
				case 2:
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					disarmRead(ctx)
				case 3:
					left.Add(1)
					<-ctx.Done()
				}
				end()
				if context.Cause(ctx) == errRequestReadTimeout {
					dropped.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	awaitIdle(t, sw, "ended")
	deadline := time.Now().Add(10 * time.Second)
	for told.Load() != dropped.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if told.Load() != dropped.Load() || dropped.Load() < left.Load() {
		t.Fatalf("%d dropped (%d left to the sweeper), %d told", dropped.Load(), left.Load(), told.Load())
	}
	t.Logf("%d dropped, %d of them left to the sweeper", dropped.Load(), left.Load())
}
