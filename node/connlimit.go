package node

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/ration"
)

// Bounds on connections where the open files limit is not known.
const (
	defaultGRPCConns = 4096
	defaultHTTPConns = 256
)

// connLimitsOf returns connLimits' bounds for a limit of nofile open files.
func connLimitsOf(nofile uint64) (grpcConns, httpConns int) {
	g := min(nofile/2, 65_536)
	h := min(nofile/8, 1024)
	return int(max(g, 16)), int(max(h, 4))
}

// portFullWarnEvery bounds how often a port warns that it is full.
const portFullWarnEvery = time.Minute

// boundedListener accepts at most bound connections at once (as
// netutil.LimitListener does, which it replaces) and counts, for the
// metrics, the connections it holds and the times it was full: without
// them, a port held full, by a flood or by too low an open files limit,
// showed only as clients that could not connect.
type boundedListener struct {
	net.Listener
	port  string // grpc or http
	bound int
	log   *zap.Logger

	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	held     atomic.Int64
	full     atomic.Uint64
	fullWarn ration.Every
}

func newBoundedListener(l net.Listener, port string, bound int, log *zap.Logger) *boundedListener {
	return &boundedListener{Listener: l, port: port, bound: bound, log: log,
		sem: make(chan struct{}, bound), done: make(chan struct{})}
}

// Accept waits for a free slot before accepting: an accepted connection
// holds a file descriptor, which is what the bound keeps. While it
// waits, new connections wait in the kernel's accept queue.
func (l *boundedListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	default:
		select {
		case <-l.done:
			// Closed, not full: a port gone refuses no one.
			return l.acceptClosed()
		default:
		}
		// Every slot held: the port is full until one closes.
		l.full.Add(1)
		l.warnFull()
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return l.acceptClosed()
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	l.held.Add(1)
	return &boundedConn{Conn: c, l: l}, nil
}

// acceptClosed is Accept on a closed listener, without a slot: it fails
// at once, as it would have (closing a connection a listener returns
// all the same, as netutil.LimitListener does).
func (l *boundedListener) acceptClosed() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c.Close()
	}
}

// warnFull warns that the port is full, at most once per
// portFullWarnEvery.
func (l *boundedListener) warnFull() {
	if !l.fullWarn.Allow(portFullWarnEvery) {
		return
	}
	l.log.Warn("a port holds its bound of connections at once: new connections wait until one closes (a flood of idle connections, or too low an open files limit for the clients and peers: docs/deploy.md, Security)",
		zap.String("port", l.port), zap.String("addr", l.Addr().String()), zap.Int("bound", l.bound),
		zap.Uint64("times_full", l.full.Load()))
}

func (l *boundedListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// boundedConn gives its slot back as it closes, once.
type boundedConn struct {
	net.Conn
	l    *boundedListener
	once sync.Once
}

func (c *boundedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.held.Add(-1)
		<-c.l.sem
	})
	return err
}

// readTimeoutWarnEvery bounds how often a node warns of calls the request
// read timeout dropped.
const readTimeoutWarnEvery = time.Minute

// requestReadTimedOut counts a call the request read timeout dropped, and
// warns, at most once per readTimeoutWarnEvery, with its caller's address
// (never its metadata or bytes: the token is in them). A few are a slow
// link; many, a caller holding the node's memory with requests it does
// not finish.
func (n *Node) requestReadTimedOut(peer net.Addr) {
	total := n.readTimeouts.Add(1)
	if !n.readTimeoutsWarn.Allow(readTimeoutWarnEvery) {
		return
	}
	addr := "unknown"
	if peer != nil {
		addr = peer.String()
	}
	n.log.Warn("dropped a call whose request did not arrive whole within the request read timeout (a slow link, or a caller holding the node's memory: docs/deploy.md, Security)",
		zap.String("peer", addr), zap.Uint64("dropped_total", total))
}
