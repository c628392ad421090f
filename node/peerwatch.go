package node

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/rivet-go/rivet/cluster"
	"github.com/rivet-go/rivet/runtime"
)

// A peer whose gRPC this node cannot reach while the peer is registered
// (its lease alive in etcd) and alive in gossip is most likely a link
// fault, not a dead node: its partitions stay where they are, and every
// request this node forwards to them fails. A user trial's one-way drop
// left a third of the actors unreachable through two nodes for minutes
// with nothing logged, health green and members all alive. The watcher
// says so: a WARN once the connection has failed for peerUnreachableWarn,
// an INFO when it is back, members' unreachable mark and
// rivet_peers_unreachable.
const (
	// peerWatchEvery is how often the watcher looks at the connections.
	peerWatchEvery = time.Second
	// peerUnreachableAfter is how long a connection must have failed for
	// members to mark its peer unreachable: longer than a reconnection
	// after a peer's restart takes.
	peerUnreachableAfter = 3 * time.Second
	// peerUnreachableWarn is how long before the node warns.
	peerUnreachableWarn = 10 * time.Second
)

// peerFault is what the watcher knows of a peer it cannot reach: since
// when, at which address (a peer registered again elsewhere starts anew).
type peerFault struct {
	addr   string
	since  time.Time
	warned bool
}

// watchPeers looks at this node's connections to its registered peers
// every tick until ctx ends.
func (v *view) watchPeers(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.checkPeers(time.Now())
		}
	}
}

// checkPeers updates the faults of the registered peers this node has a
// connection to, as of now, and logs what changed. A peer with no
// connection (never forwarded to) is not judged: nothing of this node's
// needs it (so a node whose address no node can reach, a wrong
// --advertise-addr, is marked only once a request was forwarded to it;
// dialing every registered peer ahead of that was tried, and dropped: the
// node's goroutine-leak test counted connections that no routing held).
// Nor is one gossip says left or died: its lease goes soon, and its
// partitions with it: not a network fault.
func (v *view) checkPeers(now time.Time) {
	recs := v.records()
	gone := map[string]bool{}
	if v.gossip != nil {
		for _, m := range v.gossip.Members() {
			if m.State != cluster.StateAlive {
				gone[m.ID] = true
			}
		}
	}
	var logs []func()
	v.mu.Lock()
	if v.faults == nil {
		v.faults = map[string]*peerFault{}
	}
	for id, f := range v.faults {
		if rec, ok := recs[id]; !ok || gone[id] || rec.GRPCAddr != f.addr || v.conns[f.addr] == nil {
			delete(v.faults, id)
		}
	}
	for id, rec := range recs {
		if id == v.self || gone[id] {
			continue
		}
		c := v.conns[rec.GRPCAddr]
		if c == nil {
			continue
		}
		f := v.faults[id]
		switch c.GetState() {
		case connectivity.TransientFailure, connectivity.Connecting:
			if f == nil {
				v.faults[id] = &peerFault{addr: rec.GRPCAddr, since: now}
				continue
			}
			if !f.warned && now.Sub(f.since) >= peerUnreachableWarn {
				f.warned = true
				took := now.Sub(f.since).Round(time.Second)
				logs = append(logs, func() {
					v.log.Warn("a registered node's gRPC is unreachable from this node: requests this node forwards to the partitions it owns fail (clients given several node addresses go through the others); a network fault between the two, or the node is stuck",
						zap.String("peer", id), zap.String("addr", rec.GRPCAddr), zap.Duration("for", took))
				})
			}
		case connectivity.Idle:
			// gRPC idles a connection that broke, and one unused for a
			// while (a forward to a peer in TransientFailure makes no
			// call on it, so a long cut idles it too): neither says the
			// peer is back. Connect tries it, and the next tick sees.
			if f != nil {
				c.Connect()
			}
		case connectivity.Ready:
			if f != nil {
				if f.warned {
					unreachableFor := now.Sub(f.since).Round(time.Second)
					logs = append(logs, func() {
						v.log.Info("a node's gRPC is reachable again", zap.String("peer", id), zap.Duration("unreachable_for", unreachableFor))
					})
				}
				delete(v.faults, id)
			}
		}
	}
	v.mu.Unlock()
	for _, log := range logs {
		log()
	}
}

// unreachable returns the registered peers this node has not reached for
// peerUnreachableAfter, as of now.
func (v *view) unreachable(now time.Time) map[string]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]bool{}
	for id, f := range v.faults {
		if now.Sub(f.since) >= peerUnreachableAfter {
			out[id] = true
		}
	}
	return out
}

// leaseExpirySlack is how much longer than its TTL a crashed node's lease
// may outlive it: when its etcd member led, the lease goes only once the
// rest have elected a leader (3.3-5 s for a TTL of 3 s).
const leaseExpirySlack = 2 * time.Second

// unknownLeaseTTL is the lease TTL assumed of a peer whose record does not
// say (a build before NodeRecord.LeaseTTLMillis) if this node's own is
// shorter: TTLs are set node by node (--lease-ttl), and taking a crashed
// owner's lease for shorter than it is fails the forwards that its
// failover would have served, where a longer one only holds forwards to a
// peer behind a network fault a little longer, as before the fail-fast.
const unknownLeaseTTL = 15 * time.Second

// faultOutlivesLease says whether peer id's connection has failed, as of
// now, for longer than a dead node's lease would outlive it (the peer's
// lease TTL, as its record says, plus leaseExpirySlack), and at least
// peerUnreachableAfter: while it is still registered (the watcher forgets
// a peer that is not), that is a lease still being renewed, a live node
// behind a network fault.
func (v *view) faultOutlivesLease(id string, now time.Time) bool {
	rec, _ := v.record(id)
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.faults[id]
	if f == nil {
		return false
	}
	return now.Sub(f.since) >= max(peerUnreachableAfter, v.peerLeaseTTL(rec)+leaseExpirySlack)
}

// peerLeaseTTL returns the TTL of the lease rec is on: the one its node
// published, else the longer of this node's and unknownLeaseTTL.
func (v *view) peerLeaseTTL(rec runtime.NodeRecord) time.Duration {
	if rec.LeaseTTLMillis > 0 {
		return time.Duration(rec.LeaseTTLMillis) * time.Millisecond
	}
	return max(v.leaseTTL, unknownLeaseTTL)
}
