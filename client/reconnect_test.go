package client_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/server/servertest"
)

// switchProxy passes TCP connections to a backend while up; while down it
// closes each one as it comes, as a node that is gone would refuse it, and
// notes when each came.
type switchProxy struct {
	l       net.Listener
	backend string

	mu       sync.Mutex
	down     bool
	attempts []time.Time
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newSwitchProxy(t *testing.T, backend string) *switchProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{l: l, backend: backend}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *switchProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.attempts = append(p.attempts, time.Now())
			p.mu.Unlock()
			c.Close()
			continue
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, b)
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(b, c)
		go pipe(c, b)
	}
}

// setDown turns the proxy down (closing the connections it passes) or up.
func (p *switchProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

func (p *switchProxy) attemptsSince(t0 time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.attempts {
		if at.After(t0) {
			n++
		}
	}
	return n
}

// A client whose node is down keeps trying to reconnect at least about
// once a second, however long the node has been down, so that its calls
// get through about a second after the node is back. gRPC's default
// backoff grows to two minutes between attempts: a node down for a few
// minutes (a restart, a rolling upgrade) would have its clients fail for
// up to two minutes more.
func TestAClientReconnectsWithinASecondOrSoOfItsNodeComingBack(t *testing.T) {
	p := newSwitchProxy(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	c := newClient(t, p.l.Addr().String(), client.WithRetry(10*time.Millisecond, 50*time.Millisecond))
	call := func() error {
		_, err := rivet.Call[int](ctx(t), c.GetOrCreate("counter", "k"), "increment", 1)
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("call through the proxy: %v", err)
	}
	p.setDown(true)
	start := time.Now()
	// Calls keep the client wanting a connection meanwhile.
	for time.Since(start) < 7200*time.Millisecond {
		_ = call()
		time.Sleep(50 * time.Millisecond)
	}
	// gRPC's default would have tried at about 1, 2.6, 5.2 and 9.3 s (each
	// delay within 20%, so the third by 3.12 s and the fifth from 7.4 s):
	// once in the last 3.7 s. Capped at a second, at least twice, with room
	// for a slow machine.
	if n := p.attemptsSince(start.Add(3500 * time.Millisecond)); n < 2 {
		t.Errorf("%d connection attempts in the last 3.7 s of a 7.2 s outage; want at least 2 (the backoff is capped near a second)", n)
	}
	p.setDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call got through within 10 s of the node coming back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
