package node_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// faultProxy forwards TCP to a target, the node tests' stand-in for a
// network between a node and etcd. Cut, it either resets every connection
// and holds new ones (reset), or holds every byte and every new connection
// until restored (blackhole), as a network partition would: the peer hears
// nothing, and what was in flight arrives after. Down, it closes every
// connection and refuses new ones at once (closes them as it accepts
// them), as a stopped etcd's host does, counting those attempts.
type faultProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	cut    bool
	down   bool
	tries  []time.Time // connections refused while down, when
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{lis: l, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *faultProxy) addr() string { return p.lis.Addr().String() }

// waitOpen waits until the proxy is not cut; false if it closed.
func (p *faultProxy) waitOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.cut && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

// track keeps c, to close it when the proxy goes down or closes; false
// (c closed) if it is down or closed already. A connection refused from a
// client (not one to the target) counts as a try.
func (p *faultProxy) track(c net.Conn, fromClient bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.down {
		if p.down && !p.closed && fromClient {
			p.tries = append(p.tries, time.Now())
		}
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if !p.waitOpen() {
				c.Close()
				return
			}
			up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
			if err != nil || !p.track(up, false) {
				c.Close()
				return
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.copy(up, c); up.Close(); c.Close() }()
			go func() { defer p.wg.Done(); p.copy(c, up); c.Close(); up.Close() }()
		}()
	}
}

// copy forwards src to dst, holding what it read while the proxy is cut.
func (p *faultProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts (reset: closing every connection too) or restores.
func (p *faultProxy) setCut(cut, reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut && reset {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
	p.cond.Broadcast()
}

// setDown takes the target down (closing every connection, refusing new
// ones) or up again.
func (p *faultProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
	p.cond.Broadcast()
}

// triesSince counts the connections refused since t.
func (p *faultProxy) triesSince(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.tries {
		if !at.Before(t) {
			n++
		}
	}
	return n
}
