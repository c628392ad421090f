// Package testactors holds actors that the tests of several packages run
// (the runtime's in one process, the node's across real nodes), so that
// each scenario is written once.
package testactors

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rivet-go/rivet"
)

// HubState is the state of the hub and the spokes.
type HubState struct {
	N int `json:"n"`
}

// HubProbe lets a test hold the hub's bump inside the actor: each bump
// reports its spoke on Entered, then waits for Release.
type HubProbe struct {
	Entered chan string
	Release chan struct{}

	inside, most atomic.Int32
}

// NewHubProbe returns a probe for up to four bumps at once.
func NewHubProbe() *HubProbe {
	return &HubProbe{Entered: make(chan string, 4), Release: make(chan struct{}, 4)}
}

// Most is the most bumps that ran in the hub at the same time.
func (p *HubProbe) Most() int32 { return p.most.Load() }

// Hub fans a call out to spokes at once, from one turn (fanOut); each
// spoke calls the hub back (bump), and bump calls its spoke, which calls
// the hub again (peek): a call nested in a re-entrant turn. bump is a
// read-modify-write of N, so two at once would lose one.
func Hub(p *HubProbe) rivet.Actor[HubState] {
	return rivet.Actor[HubState]{
		Name: "hub",
		Actions: rivet.Actions[HubState]{
			"fanOut": rivet.Action(func(c *rivet.ActionCtx[HubState], spokes []string) (int, error) {
				var wg sync.WaitGroup
				errs := make([]error, len(spokes))
				for i, s := range spokes {
					wg.Go(func() {
						_, errs[i] = c.Client().GetOrCreate("spoke", s).Call(c.Context(), "poke", c.Key()[0])
					})
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					return 0, err
				}
				return c.State.N, nil
			}),
			"bump": rivet.Action(func(c *rivet.ActionCtx[HubState], spoke string) (int, error) {
				n := p.inside.Add(1)
				defer p.inside.Add(-1)
				for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
				}
				seen, err := rivet.Call[int](c.Context(), c.Client().Get("spoke", spoke), "echo", c.Key()[0])
				if err != nil {
					return 0, fmt.Errorf("nested call: %w", err)
				}
				p.Entered <- spoke
				select {
				case <-p.Release:
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				c.State.N = seen + 1
				return c.State.N, nil
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[HubState]) (int, error) { return c.State.N, nil }),
		},
	}
}

// Spoke calls the hub back: poke calls bump, echo calls peek.
func Spoke() rivet.Actor[HubState] {
	return rivet.Actor[HubState]{
		Name: "spoke",
		Actions: rivet.Actions[HubState]{
			"poke": rivet.Action(func(c *rivet.ActionCtx[HubState], hubKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "bump", c.Key()[0])
			}),
			"echo": rivet.Action(func(c *rivet.ActionCtx[HubState], hubKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "peek")
			}),
		},
	}
}
