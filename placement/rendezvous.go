package placement

import (
	"hash/fnv"
	"slices"
	"sort"
)

// Owner returns the node that should own partition p among nodes, by
// rendezvous (highest random weight) hashing: each node scores the
// partition and the highest score wins. When a node joins, only the
// partitions it now wins move (to it); when one leaves, only its own move.
// nodes must be non-empty; their order does not matter. Ties (equal scores)
// go to the smaller node ID, so every node computes the same answer.
func Owner(p uint32, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, n := range nodes {
		s := score(p, n)
		if best == "" || s > bestScore || s == bestScore && n < best {
			best, bestScore = n, s
		}
	}
	return best
}

// Table returns the owner of each of the partitions [0, count) among
// nodes (nil if there are no nodes).
func Table(count uint32, nodes []string) []string {
	if len(nodes) == 0 {
		return nil
	}
	sorted := append([]string(nil), nodes...)
	sort.Strings(sorted)
	out := make([]string, count)
	for p := range out {
		out[p] = Owner(uint32(p), sorted)
	}
	return out
}

// score is the weight of node for partition p: FNV-1a 64 of the node ID,
// then mixed with the partition by splitmix64's finaliser, so that scores
// of one node for consecutive partitions are unrelated.
func score(p uint32, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	x := h.Sum64() ^ (uint64(p) * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Ring returns the nodes partitions are placed over, sorted (in place):
// the eligible ones, or, when there are none, the draining ones (fallback
// true), so that a cluster whose every node drains still serves. The
// nodes' balancers place by it, and rivetctl drain's check predicts with
// it where a drain sends a node's partitions.
func Ring(eligible, draining []string) (nodes []string, fallback bool) {
	nodes = eligible
	if len(nodes) == 0 {
		nodes, fallback = draining, true
	}
	slices.Sort(nodes)
	return nodes, fallback && len(nodes) > 0
}
