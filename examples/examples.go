// Package examples gathers the example actors that the reference node
// (cmd/node) hosts: the counter, the seed's timer and concurrency
// patterns (with the seed's actor, queue and entry names), a session
// that expires by a scheduled call and a page-view counter that writes
// behind with lifecycle hooks, each in its own package.
package examples

import (
	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/pageviews"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/examples/session"
)

// All returns every example actor definition.
func All() []rivet.Definition {
	return []rivet.Definition{
		counter.Actor,
		seed.ReminderActor,
		seed.TimeoutActor,
		seed.DashboardActor,
		seed.AuctionActor,
		seed.FanInOutActor,
		seed.ScatterGatherActor,
		seed.ShardActor,
		seed.PollBackoffActor,
		seed.CoordinatorActor,
		seed.WorkerActor,
		seed.OrchestratorActor,
		seed.ChildWorkerActor,
		seed.TimeoutFallbackActor,
		seed.PrimaryServiceActor,
		seed.FallbackServiceActor,
		session.Actor,
		pageviews.Actor,
	}
}

// Registry returns a registry of every example actor. It refuses an
// environment that sets the examples' settings to values that do not parse,
// so that a node does not start with a setting silently ignored.
func Registry() (*rivet.Registry, error) {
	if err := exampleapi.CheckEnv(); err != nil {
		return nil, err
	}
	d, err := seed.AuctionTimeoutFromEnv()
	if err != nil {
		return nil, err
	}
	if d > 0 {
		seed.AuctionTimeout = d
	}
	return rivet.Setup(All()...)
}
