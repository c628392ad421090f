package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A dial whose deadline is already past fails at once, as memberlist's own
// transport's does (net.Dialer), even to a peer that would answer: with no
// limit instead, memberlist's fallback ping of a dead peer, made late by a
// busy machine, held up all probing (so every failure detection) for as
// long as the kernel retries its SYNs.
func TestADialPastItsDeadlineFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tr, err := newTransport(net.IPv4(127, 0, 0, 1), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { tr.abort(); _ = tr.Shutdown() }()
	c, err := tr.DialAddressTimeout(memberlist.Address{Addr: l.Addr().String()}, -time.Millisecond)
	if err == nil {
		c.Close()
		t.Fatal("a dial with its deadline past connected")
	}
	if c, err := tr.DialAddressTimeout(memberlist.Address{Addr: l.Addr().String()}, 0); err != nil {
		t.Fatalf("a dial with no timeout: %v", err)
	} else {
		c.Close()
	}
	l.Close()
	<-accepted
}
