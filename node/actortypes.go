package node

import (
	"slices"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/typesets"
)

// typeDifferences returns the actor types that some registered nodes
// register and others do not, and the nodes whose registrations do not say
// which types they register (older builds), left out of the comparison.
func (v *view) typeDifferences() (diffs []typesets.Diff, unknown []string) {
	known := map[string][]string{}
	for id, rec := range v.recordsCached() {
		if !rec.KnownTypes() {
			unknown = append(unknown, id)
			continue
		}
		known[id] = rec.ActorTypes
	}
	slices.Sort(unknown)
	return typesets.Differences(known), unknown
}

// checkTypes logs, once per change (watchCluster calls it whenever the
// registrations change), that the registered nodes register different
// actor types, naming the types and nodes, and once they no longer do: a
// call of a type its partition's owner does not register fails, and a
// workflow of such a type does not run there.
func (n *Node) checkTypes() {
	diffs, unknown := n.view.typeDifferences()
	said := typesets.Format(diffs)
	if said == n.typesSaid {
		return
	}
	prev := n.typesSaid
	n.typesSaid = said
	if said == "" {
		n.log.Info("the registered nodes register the same actor types again", zap.String("was", prev))
		return
	}
	types := make([]string, len(diffs))
	for i, d := range diffs {
		types[i] = d.Type
	}
	fields := []zap.Field{zap.Strings("types", types), zap.String("differences", said)}
	if len(unknown) > 0 {
		fields = append(fields, zap.Strings("types_unknown_on", unknown))
	}
	n.log.Warn("the registered nodes register different actor types: a call of one whose partition's owner does not register it fails, and a workflow of it does not run there; every node must register the same actor types (docs/deploy.md, \"Adding or removing an actor type\")", fields...)
}
