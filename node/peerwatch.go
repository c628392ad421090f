package node

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// A peer whose gRPC this node cannot reach while the peer is registered
// (its lease alive in etcd) is a link fault, not a dead node: its
// partitions stay where they are, and every request this node forwards to
// them fails. A user trial's one-way drop left a third of the actors
// unreachable through two nodes for minutes with nothing logged, health
// green and members all alive. The watcher says so: a WARN once the
// connection has failed for peerUnreachableWarn, an INFO when it is back,
// members' unreachable mark and rivet_peers_unreachable.
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

// peerFault is what the watcher knows of a peer it cannot reach.
type peerFault struct {
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
// connection to, as of now. A peer with no connection (never forwarded
// to) is not judged: nothing of this node's needs it.
func (v *view) checkPeers(now time.Time) {
	recs := v.records()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.faults == nil {
		v.faults = map[string]*peerFault{}
	}
	for id := range v.faults {
		if rec, ok := recs[id]; !ok || v.conns[rec.GRPCAddr] == nil {
			// Gone (its lease with it), or no longer connected to.
			delete(v.faults, id)
		}
	}
	for id, rec := range recs {
		if id == v.self {
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
				v.faults[id] = &peerFault{since: now}
				continue
			}
			if !f.warned && now.Sub(f.since) >= peerUnreachableWarn {
				f.warned = true
				v.log.Warn("a registered node's gRPC is unreachable from this node: requests this node forwards to the partitions it owns fail (clients given several node addresses go through the others); check the network between the nodes",
					zap.String("peer", id), zap.String("addr", rec.GRPCAddr), zap.Duration("for", now.Sub(f.since).Round(time.Second)))
			}
		default:
			if f != nil {
				if f.warned {
					v.log.Info("a node's gRPC is reachable again", zap.String("peer", id), zap.Duration("unreachable_for", now.Sub(f.since).Round(time.Second)))
				}
				delete(v.faults, id)
			}
		}
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
