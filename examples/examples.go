// Package examples gathers the example actors that the reference node
// (cmd/node) hosts: the counter, and the seed's timer and concurrency
// patterns, each in its own package with the seed's actor, queue and entry
// names.
package examples

import (
	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
)

// All returns every example actor definition.
func All() []rivet.Definition {
	return []rivet.Definition{
		counter.Actor,
	}
}

// Registry returns a registry of every example actor.
func Registry() (*rivet.Registry, error) { return rivet.Setup(All()...) }
