// Package cluster tells a node which other nodes exist and whether they are
// up. It wraps hashicorp/memberlist (SWIM gossip over UDP and TCP on one
// port) so that the node package can build its placement ring from the
// members that are alive, and learn the gRPC address of each from gossiped
// metadata.
//
// The caller's duties:
//
//  1. Start a Cluster with a unique NodeID and the seeds to join. Start
//     returns once this node listens; joining goes on in the background,
//     because in a fresh deployment the seeds may start after us. Joined
//     tells when it has worked once.
//  2. Wait on Changes and then read Alive (or Members). Changes coalesces:
//     one pending notification stands for any number of changes, so the
//     consumer always reads the current state, never a stale diff. Events
//     is a lossy log for logs and metrics; it drops its oldest entries when
//     nobody reads it (see Dropped), so it must not drive placement.
//  3. On shutdown call Leave, so the others drop this node at once instead
//     of waiting to declare it dead; Stop is for when leaving is not
//     possible or wanted (tests simulating a crash).
//
// Neither memberlist's callbacks nor its gossip ever wait for the consumer:
// every send on Changes or Events is non-blocking.
//
// Member states: memberlist v0.7.0 does not expose suspicion, so a suspect
// member reads as alive (which is what the ring wants anyway: dropping
// suspects would move partitions back and forth on every lost packet). Nor
// does it tell a failed member from one that left; this package tells them
// apart by having a leaving node first gossip a "leaving" mark in its
// metadata (see Cluster.Leave).
package cluster
