package placement

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

func nodeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%02d", i)
	}
	return out
}

// reference is a deliberately naive owner: sort all (score, node) pairs.
func reference(p uint32, nodes []string) string {
	type cand struct {
		s uint64
		n string
	}
	cs := make([]cand, len(nodes))
	for i, n := range nodes {
		cs[i] = cand{score(p, n), n}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].s != cs[j].s {
			return cs[i].s > cs[j].s
		}
		return cs[i].n < cs[j].n
	})
	return cs[0].n
}

func TestOwnerMatchesBruteForceAndIgnoresOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2)) // seeded: the same cases every run
	for range 200 {
		nodes := nodeIDs(1 + r.IntN(12))
		p := uint32(r.IntN(4096))
		want := reference(p, nodes)
		r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		if got := Owner(p, nodes); got != want {
			t.Fatalf("Owner(%d, %v) = %s, brute force says %s", p, nodes, got, want)
		}
	}
}

func TestBalance(t *testing.T) {
	for _, n := range []int{3, 10} {
		table := Table(DefaultPartitions, nodeIDs(n))
		load := map[string]int{}
		for _, o := range table {
			load[o]++
		}
		mean := float64(DefaultPartitions) / float64(n)
		most := 0
		for _, l := range load {
			most = max(most, l)
		}
		ratio := float64(most) / mean
		t.Logf("%d nodes: max/mean load %.3f", n, ratio)
		if len(load) != n || ratio > 1.3 {
			t.Fatalf("%d nodes: loads %v (max/mean %.2f)", n, load, ratio)
		}
	}
}

// Joining moves partitions only to the new node, about 1/(n+1) of them;
// leaving moves only the leaver's partitions.
func TestMinimalMovement(t *testing.T) {
	nodes := nodeIDs(5)
	before := Table(DefaultPartitions, nodes)
	after := Table(DefaultPartitions, append(nodes, "node-new"))
	moved := 0
	for p := range before {
		if before[p] != after[p] {
			moved++
			if after[p] != "node-new" {
				t.Fatalf("partition %d moved from %s to %s on a join", p, before[p], after[p])
			}
		}
	}
	if want := DefaultPartitions / 6; moved < want/2 || moved > want*3/2 {
		t.Fatalf("a join moved %d partitions, want about %d", moved, want)
	}
	left := Table(DefaultPartitions, nodes[1:])
	for p := range before {
		if before[p] != nodes[0] && left[p] != before[p] {
			t.Fatalf("partition %d moved from %s to %s when %s left", p, before[p], left[p], nodes[0])
		}
	}
}
