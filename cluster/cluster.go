package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Cluster is this process's membership in a cluster. Its methods are safe
// for concurrent use.
type Cluster struct {
	log        *zap.Logger
	id         string
	gossipAddr string
	ml         *memberlist.Memberlist
	tr         *transport
	meta       *metaDelegate
	view       *view
	joined     chan struct{} // closed by the joiner on its first success, or by Start when there is nothing to join
	// twin is set once gossip has named this member's ID at another
	// address: another process under this node's ID (twinDelegate).
	twin atomic.Bool
	// shuttingDown quiets memberlist's logs from the start of shutdown on.
	shuttingDown *atomic.Bool
	// rebroadcastAfter is Profile.rebroadcastAfter.
	rebroadcastAfter time.Duration

	// life serializes UpdateMeta, Leave and Stop, so that memberlist is
	// never used after its Shutdown (its Leave panics then).
	life  sync.Mutex
	state lifeState // guarded by life
	// stop is closed when Leave or Stop begins; the joiner returns on it.
	stop chan struct{}
	// wg counts the joiner, the only goroutine this package starts itself.
	wg sync.WaitGroup
}

type lifeState int

const (
	running lifeState = iota
	left              // Leave has run; Stop is a no-op
	stopped           // Stop has run; Leave returns ErrStopped
)

// Start binds the gossip port and starts memberlist, then, if cfg.Join
// names other members, joins them in the background (see Joined). It does
// not wait for any other member; it may wait up to 10 s to resolve host
// names in BindAddr and AdvertiseAddr. Errors wrap ErrInvalidConfig or
// ErrMetaTooLarge for a bad cfg; others come from binding the port.
func Start(cfg Config) (*Cluster, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	shuttingDown := new(atomic.Bool)
	stdlog := newStdLogger(s.Logger.Named("memberlist"), shuttingDown)
	tr, err := newTransport(s.bindIP, s.bindPort, stdlog)
	if err != nil {
		return nil, err
	}
	boundPort := tr.GetAutoBindPort()
	advPort := s.advPort
	if advPort == 0 {
		advPort = boundPort
	}

	c := &Cluster{
		log:    s.Logger,
		id:     s.NodeID,
		tr:     tr,
		meta:   &metaDelegate{},
		view:   newView(s.Logger),
		joined: make(chan struct{}),
		stop:   make(chan struct{}),

		shuttingDown:     shuttingDown,
		rebroadcastAfter: s.Profile.rebroadcastAfter(),
	}
	if err := c.meta.set(s.Meta, false); err != nil {
		tr.abort()
		_ = tr.Shutdown()
		return nil, err
	}

	mc := s.Profile.memberlistConfig()
	mc.Name = s.NodeID
	// memberlist uses the bind port as the default port of seeds given
	// without one.
	mc.BindAddr, mc.BindPort = s.bindIP.String(), boundPort
	mc.AdvertiseAddr, mc.AdvertisePort = s.advIP.String(), advPort
	mc.Transport = tr
	mc.Logger = stdlog
	mc.SecretKey = s.GossipKey
	mc.Delegate = c.meta
	mc.Events = c.view
	// A node that died and comes back under its name (node IDs persist
	// in the data directory) at another address (a rescheduled container)
	// is taken at once: memberlist's default refuses the new address for
	// as long as it remembers the dead one (GossipToTheDeadTime, 30 s on
	// a LAN), during which the others leave it out of their rings while it
	// counts itself in. Node IDs are unique (a duplicate revokes the
	// other's lease, and the older process then stops:
	// runtime.ErrReplaced), so a name is not claimed by two live nodes
	// for long.
	mc.DeadNodeReclaimTime = time.Second
	mc.Conflict = twinDelegate{c}
	ml, err := memberlist.Create(mc)
	if err != nil {
		// Create shuts the transport down on some errors and not others;
		// a second Shutdown is harmless.
		tr.abort()
		_ = tr.Shutdown()
		return nil, fmt.Errorf("cluster: start memberlist: %w", err)
	}
	c.ml = ml
	c.gossipAddr = ml.LocalNode().Address()

	seeds := otherSeeds(s.Join, s.advIP, advPort)
	c.log.Info("cluster member started",
		zap.String("id", c.id), zap.String("gossip", c.gossipAddr),
		zap.Stringer("profile", s.Profile), zap.Strings("join", seeds),
		zap.Bool("encrypted", len(s.GossipKey) > 0))
	if len(seeds) == 0 {
		close(c.joined)
	} else {
		c.wg.Add(1)
		go c.joinLoop(seeds, s.Profile)
	}
	return c, nil
}

// otherSeeds returns seeds without this member's own advertised address,
// so that every node can be given the same list: memberlist would count a
// join to itself as a success.
func otherSeeds(seeds []string, advIP net.IP, advPort int) []string {
	var out []string
	for _, s := range seeds {
		host, port, err := net.SplitHostPort(s)
		if err == nil && port == strconv.Itoa(advPort) {
			if ip := net.ParseIP(host); ip != nil && ip.Equal(advIP) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// joinLoop tries the seeds until this member knows another one, pausing
// with jittered exponential backoff between attempts. It counts a success
// by membership rather than by memberlist's reply count, so that a seed
// list naming this member under another address (a host name, loopback)
// does not count, and so that being joined by others counts too.
func (c *Cluster) joinLoop(seeds []string, p Profile) {
	defer c.wg.Done()
	pause, maxPause := p.joinBackoff()
	for attempt := 1; ; attempt++ {
		reached, err := c.ml.Join(seeds)
		if c.ml.NumMembers() > 1 {
			c.log.Info("joined cluster", zap.Int("attempts", attempt), zap.Int("members", c.ml.NumMembers()))
			close(c.joined)
			return
		}
		if reached > 0 && c.twin.Load() {
			// A seed answered, knowing no member but this one's ID at
			// another address: the process this one replaces (it
			// revokes that one's lease, and that one gives way), the
			// only other member of a one-node cluster. Waiting for
			// another member would wait out the node's settle timeout
			// for one that is not there.
			c.log.Warn("joined cluster: the seeds know only another process under this node's ID, which this one replaces",
				zap.Int("attempts", attempt), zap.Strings("seeds", seeds))
			close(c.joined)
			return
		}
		if err == nil {
			err = fmt.Errorf("%d seeds reached, none knows another member", reached)
		}
		// The first failure is expected when seeds start after us; later
		// ones are worth a warning, but not at every attempt.
		level := zapcore.DebugLevel
		switch {
		case attempt == 1:
			level = zapcore.InfoLevel
		case attempt%10 == 0:
			level = zapcore.WarnLevel
		}
		if ce := c.log.Check(level, "cannot join cluster yet; retrying"); ce != nil {
			ce.Write(zap.Strings("seeds", seeds), zap.Int("attempt", attempt), zap.Duration("retryIn", pause), zap.Error(err))
		}
		select {
		case <-c.stop:
			return
		case <-time.After(pause/2 + rand.N(pause/2+1)):
		}
		pause = min(2*pause, maxPause)
	}
}

// twinDelegate notes a member gossip names with this member's ID at
// another address (memberlist keeps this one's and logs the conflict).
type twinDelegate struct{ c *Cluster }

func (d twinDelegate) NotifyConflict(_, other *memberlist.Node) {
	if other.Name == d.c.id {
		d.c.twin.Store(true)
	}
}

// LocalID returns this member's ID (Config.NodeID).
func (c *Cluster) LocalID() string { return c.id }

// GossipAddr returns the gossip address other members dial, with the port
// actually bound when Config.BindAddr asked for port 0.
func (c *Cluster) GossipAddr() string { return c.gossipAddr }

// Members returns every member this member knows of, itself included,
// sorted by ID: the alive ones and, for a minute, the dead and left ones.
// After Stop or Leave it returns the last view.
func (c *Cluster) Members() []Member {
	return c.view.snapshot(func(*entry) bool { return true })
}

// Alive returns the members that are up, itself included, sorted by ID:
// the set to place work on. A member under suspicion is still in it, so
// that one lost packet does not move work away and back.
func (c *Cluster) Alive() []Member {
	return c.view.snapshot(func(e *entry) bool { return e.State == StateAlive })
}

// Changes returns a channel that receives after any change to Members
// (join, leave, failure, metadata). Changes coalesce: one receive may stand
// for several, so the receiver reads Alive or Members for the current
// state. It never blocks gossip, and is never closed.
func (c *Cluster) Changes() <-chan struct{} { return c.view.changes }

// Events returns the changes one by one, for logs and metrics. It holds
// up to 256 events; when the receiver falls further behind, the oldest are
// dropped (counted by Dropped), so it must not be the source of exact
// state: use Changes and Alive for that. It is never closed.
func (c *Cluster) Events() <-chan Event { return c.view.events }

// Dropped returns how many events Events has dropped.
func (c *Cluster) Dropped() uint64 { return c.view.dropped.Load() }

// Joined returns a channel closed once this member knows another one
// through a join, or a seed it reached knows no member but another
// process under this member's ID (the process it replaces): at once if
// Config.Join lists no other member. It is never closed if Stop or Leave
// comes first.
func (c *Cluster) Joined() <-chan struct{} { return c.joined }

// UpdateMeta replaces this member's metadata and gossips it, waiting up to
// timeout (zero or less: without limit) for the gossip to go out to other
// members, if there are any. It returns ErrMetaTooLarge (and keeps the old
// metadata), ErrStopped, or ErrBroadcastTimeout (the update is made all
// the same and spreads later). Stop waits for a call in progress.
func (c *Cluster) UpdateMeta(m Meta, timeout time.Duration) error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.state != running {
		return ErrStopped
	}
	if err := c.meta.set(m, false); err != nil {
		return err
	}
	return c.broadcastMeta(deadlineAfter(timeout))
}

// deadlineAfter returns the deadline timeout from now, or the zero time
// (no deadline) if timeout is zero or less.
func deadlineAfter(timeout time.Duration) time.Time {
	if timeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(timeout)
}

// broadcastMeta makes memberlist gossip the metadata of c.meta and waits
// until deadline (zero: without limit) for it to go out, broadcasting anew
// every rebroadcastAfter because memberlist may lose the broadcast (see
// Profile.rebroadcastAfter). c.life is held.
func (c *Cluster) broadcastMeta(deadline time.Time) error {
	for attempt := 1; ; attempt++ {
		wait := c.rebroadcastAfter
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("%w: metadata, after %d broadcasts", ErrBroadcastTimeout, attempt-1)
			}
			// Never zero, which memberlist reads as no limit.
			wait = min(wait, left)
		}
		if c.ml.UpdateNode(wait) == nil {
			return nil
		}
		c.log.Debug("metadata broadcast not confirmed; broadcasting again", zap.Int("attempt", attempt))
	}
}

// Leave tells the other members that this one is leaving, so that they
// drop it (as StateLeft) within a few gossip rounds instead of declaring it
// dead after probes fail, and then shuts it down like Stop. It waits up to
// timeout (zero or less: without limit) for the announcements to go out;
// past it, it shuts down anyway and returns ErrBroadcastTimeout. A second
// call returns nil; a call after Stop returns ErrStopped.
//
// The announcement takes two broadcasts: first this member's metadata with
// a leaving mark, then memberlist's own leave. memberlist reports its leave
// to the others exactly like a failure, and the mark lets them tell the
// difference. A member that misses the mark (gossip is best effort) reports
// StateDead instead of StateLeft; it still drops the member as fast. If
// memberlist loses its leave broadcast (see Profile.rebroadcastAfter), which
// cannot be repeated, Leave waits out its timeout and the others drop this
// member only once their probes fail, as after Stop.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.life.Lock()
	defer c.life.Unlock()
	switch c.state {
	case left:
		return nil
	case stopped:
		return ErrStopped
	}
	c.state = left
	close(c.stop)

	// The mark gets half the time, so that a lost mark leaves time for the
	// leave itself, which matters more.
	deadline, markDeadline := deadlineAfter(timeout), deadlineAfter(timeout/2)
	if timeout > 0 && markDeadline.IsZero() {
		markDeadline = deadline
	}
	var errs []error
	c.meta.markLeaving()
	if err := c.broadcastMeta(markDeadline); err != nil {
		errs = append(errs, fmt.Errorf("leaving mark: %w", err))
	}
	rest := time.Duration(0)
	if !deadline.IsZero() {
		// Never zero, which memberlist reads as no limit.
		rest = max(time.Until(deadline), time.Millisecond)
	}
	if err := c.ml.Leave(rest); err != nil {
		errs = append(errs, fmt.Errorf("%w: leave: %v", ErrBroadcastTimeout, err))
	}
	c.log.Info("left cluster", zap.String("id", c.id), zap.Errors("errors", errs))
	return errors.Join(append(errs, c.shutdown())...)
}

// Stop shuts this member down without telling the others, which declare it
// dead once their probes fail (about 6 s with ProfileLAN, 1 s with
// ProfileLocal). It stops the background joiner and releases the port.
// Calling it again, or after Leave, does nothing.
func (c *Cluster) Stop() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.state != running {
		return nil
	}
	c.state = stopped
	close(c.stop)
	err := c.shutdown()
	c.log.Info("cluster member stopped", zap.String("id", c.id))
	return err
}

// shutdown stops memberlist, then the joiner. memberlist goes first so that
// its tickers start no new probe or sync; the transport's abort then ends
// the dials and syncs in flight, the joiner's included, which would
// otherwise run until their TCP timeout. c.life is held.
func (c *Cluster) shutdown() error {
	c.shuttingDown.Store(true)
	err := c.ml.Shutdown()
	c.tr.abort()
	c.wg.Wait()
	c.view.freeze()
	if err != nil {
		return fmt.Errorf("cluster: shutdown: %w", err)
	}
	return nil
}
