package cluster

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's UDP+TCP transport with one addition: abort
// cuts short the TCP dials and connections memberlist has made. Without it,
// Stop would wait for a join attempt to a seed whose host is down until the
// TCP timeout (10 s on a LAN), since memberlist dials without a context.
type transport struct {
	*memberlist.NetTransport

	// dialCtx is cancelled by abort. It is stored, against the usual rule,
	// because memberlist's dial methods take no context; it lives exactly as
	// long as the transport.
	dialCtx context.Context
	cancel  context.CancelFunc

	mu    sync.Mutex
	conns map[*trackedConn]struct{} // outbound connections still open; nil once aborted
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

var errAborted = errors.New("cluster: transport stopped")

// bindRetries is how many ports to try when the caller asked for any free
// one: the kernel picks a free TCP port, and the UDP port of the same
// number may be taken.
const bindRetries = 10

func newTransport(ip net.IP, port int, logger *log.Logger) (*transport, error) {
	nc := &memberlist.NetTransportConfig{
		BindAddrs: []string{ip.String()},
		BindPort:  port,
		Logger:    logger,
	}
	tries := 1
	if port == 0 {
		tries = bindRetries
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			ctx, cancel := context.WithCancel(context.Background())
			return &transport{
				NetTransport: nt,
				dialCtx:      ctx,
				cancel:       cancel,
				conns:        make(map[*trackedConn]struct{}),
			}, nil
		}
		// NewNetTransport formats its error with %v, so errors.Is cannot
		// find syscall.EADDRINUSE; memberlist itself matches the text too.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("cluster: listen on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
}

// DialTimeout overrides NetTransport's, which would not go through
// DialAddressTimeout below.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := t.dialCtx, context.CancelFunc(func() {})
	if timeout != 0 {
		// A timeout already past fails at once, as net.Dialer's does:
		// memberlist's fallback ping dials with the time left to its
		// probe's deadline, which a late probe finds negative, and waits
		// for that dial before it probes anyone else.
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", a.Addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		_ = conn.Close()
		return nil, errAborted
	}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// abort fails every dial in progress or to come and closes the outbound
// connections, so that the goroutines using them return.
func (t *transport) abort() {
	t.cancel()
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// trackedConn removes itself from its transport's set when memberlist
// closes it.
type trackedConn struct {
	net.Conn
	t *transport
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}
