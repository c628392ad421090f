package node

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// acceptOne accepts on l with a deadline: a connection dialed to l.
func acceptOne(t *testing.T, l *boundedListener) net.Conn {
	t.Helper()
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.c
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return within 10 s with a slot free and a connection waiting")
		return nil
	}
}

func newTestBounded(t *testing.T, bound int) (*boundedListener, *observer.ObservedLogs) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	l := newBoundedListener(raw, "grpc", bound, zap.New(core))
	t.Cleanup(func() { l.Close() })
	return l, logs
}

// A connection closed twice (gRPC and the HTTP server may both close
// one on an error) gives its slot back once: the gauge does not go below
// what is held, and the bound still holds.
func TestBoundedConnClosedTwiceReleasesOnce(t *testing.T) {
	l, _ := newTestBounded(t, 2)
	a := acceptOne(t, l)
	b := acceptOne(t, l)
	a.Close()
	a.Close()
	if h, s := l.held.Load(), len(l.sem); h != 1 || s != 1 {
		t.Fatalf("after one of two connections closed twice: held %d, slots taken %d; want 1 and 1", h, s)
	}
	b.Close()
	if h, s := l.held.Load(), len(l.sem); h != 0 || s != 0 {
		t.Fatalf("after both closed: held %d, slots taken %d; want 0 and 0", h, s)
	}
}

// An Accept waiting for a slot returns once the listener closes, and an
// Accept after the close fails at once: neither counts the port full nor
// warns (the port is not refusing anyone; it is gone).
func TestBoundedListenerCloseWhileFull(t *testing.T) {
	l, logs := newTestBounded(t, 1)
	c := acceptOne(t, l)
	defer c.Close()
	errc := make(chan error, 1)
	go func() { _, err := l.Accept(); errc <- err }()
	// Waiting for the slot once the full count says so.
	deadline := time.Now().Add(10 * time.Second)
	for l.full.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the Accept past the bound was not counted full within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept waiting as the listener closed: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept waiting for a slot did not return within 10 s of the listener's close")
	}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after the close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept after the close did not return within 10 s")
	}
	if f := l.full.Load(); f != 1 {
		t.Fatalf("full counted %d times, want 1: an Accept on a closed listener is not a full port", f)
	}
	if n := logs.FilterMessageSnippet("holds its bound").Len(); n != 1 {
		t.Fatalf("%d warnings of a full port, want 1", n)
	}
	c.Close()
	if h, s := l.held.Load(), len(l.sem); h != 0 || s != 0 {
		t.Fatalf("after the close: held %d, slots taken %d; want 0 and 0", h, s)
	}
}

// failingListener fails its next Accept with err, as an accept does out
// of file descriptors.
type failingListener struct {
	net.Listener
	err chan error
}

func (f *failingListener) Accept() (net.Conn, error) {
	select {
	case err := <-f.err:
		return nil, err
	default:
		return f.Listener.Accept()
	}
}

// An accept that fails (EMFILE, which the HTTP server and gRPC retry)
// gives its slot back: without, each failure took one for good.
func TestBoundedListenerAcceptErrorReleases(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: raw, err: make(chan error, 1)}
	l := newBoundedListener(fl, "http", 1, zap.NewNop())
	defer l.Close()
	fl.err <- syscall.EMFILE
	if _, err := l.Accept(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Accept: %v, want EMFILE", err)
	}
	if h, s := l.held.Load(), len(l.sem); h != 0 || s != 0 {
		t.Fatalf("after a failed accept: held %d, slots taken %d; want 0 and 0", h, s)
	}
	c := acceptOne(t, l)
	c.Close()
	if f := l.full.Load(); f != 0 {
		t.Fatalf("full counted %d times, want 0", f)
	}
}
