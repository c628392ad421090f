// Package typesets compares the actor types the nodes of a cluster
// register: every node must register the same ones, since a partition's
// owner serves every actor of it, whatever its type (docs/deploy.md,
// "Adding or removing an actor type").
package typesets

import (
	"fmt"
	"slices"
	"strings"
)

// Diff is one actor type that some nodes register and others do not.
type Diff struct {
	Type string
	// On are the nodes that register it, NotOn those that do not, each
	// sorted.
	On, NotOn []string
}

// Differences returns the types that some of the nodes register and others
// do not, sorted by type. types maps each node's ID to the types it
// registers. Leave out a node whose types are unknown (a build that does
// not say which it registers): here it would count as registering none.
func Differences(types map[string][]string) []Diff {
	ids := make([]string, 0, len(types))
	all := map[string]bool{}
	for id, ts := range types {
		ids = append(ids, id)
		for _, t := range ts {
			all[t] = true
		}
	}
	slices.Sort(ids)
	var out []Diff
	for t := range all {
		d := Diff{Type: t}
		for _, id := range ids {
			if slices.Contains(types[id], t) {
				d.On = append(d.On, id)
			} else {
				d.NotOn = append(d.NotOn, id)
			}
		}
		if len(d.NotOn) > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Diff) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// Format says diffs in words: "order on b, not on a; ...". Long lists are
// cut, saying how many more there are.
func Format(diffs []Diff) string {
	const most = 10
	parts := make([]string, 0, min(len(diffs), most)+1)
	for i, d := range diffs {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more types", len(diffs)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("%s on %s, not on %s", d.Type, List(d.On), List(d.NotOn)))
	}
	return strings.Join(parts, "; ")
}

// List joins ids, cut after a few, saying how many more there are.
func List(ids []string) string {
	const most = 8
	if len(ids) > most {
		return strings.Join(ids[:most], ", ") + fmt.Sprintf(" and %d more", len(ids)-most)
	}
	return strings.Join(ids, ", ")
}

// Missing returns the types of want that have lacks, sorted.
func Missing(want, have []string) []string {
	var out []string
	for _, t := range want {
		if !slices.Contains(have, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}
