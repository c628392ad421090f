// Package pageviews shows an actor's lifecycle hooks and vars: a page-view
// counter that counts in memory and writes behind. A view is a read-only
// action that adds to a count in the actor's vars (no commit per view); a
// recurring scheduled call and OnSleep move that count into the durable
// state. This is Rivet's vars with onWake/onSleep, Orleans' grain fields
// with OnActivateAsync/OnDeactivateAsync, and the trade they make: views
// since the last flush are lost if the node crashes, never on an orderly
// sleep, move or stop.
package pageviews

import (
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet"
)

// FlushEvery is how often the views counted in memory are made durable
// while the actor is awake. A variable for tests.
var FlushEvery = 5 * time.Second

// State is the durable state.
type State struct {
	// Total is the views made durable.
	Total int64 `json:"total"`
	// Wakes counts the times the actor was loaded into memory; Sleeps,
	// the orderly deactivations that flushed.
	Wakes  int `json:"wakes"`
	Sleeps int `json:"sleeps"`
	// Scheduled says the recurring flush exists (made once, by OnWake).
	Scheduled bool `json:"scheduled"`
}

// buffer is the actor's vars: views counted since the last flush.
type buffer struct{ pending atomic.Int64 }

// View is what view and getState return.
type View struct {
	State
	// Pending is the views counted in memory, not yet durable.
	Pending int64 `json:"pending"`
}

func flush(c *rivet.ActionCtx[State]) {
	c.State.Total += c.Vars().(*buffer).pending.Swap(0)
}

func view(c *rivet.ActionCtx[State]) View {
	return View{State: *c.State, Pending: c.Vars().(*buffer).pending.Load()}
}

// Actor is "pageViews": view counts a view (in memory), getState returns
// the state and the views pending, flush makes them durable now.
var Actor = rivet.Actor[State]{
	Name:       "pageViews",
	CreateVars: func(*rivet.ActionCtx[State]) (any, error) { return &buffer{}, nil },
	OnWake: func(c *rivet.ActionCtx[State]) error {
		c.State.Wakes++
		if !c.State.Scheduled {
			// Made once in the actor's life: the call and the flag
			// commit together.
			if _, err := c.Schedule().Every("flush", FlushEvery, "flush"); err != nil {
				return err
			}
			c.State.Scheduled = true
		}
		return nil
	},
	OnSleep: func(c *rivet.ActionCtx[State]) error {
		flush(c)
		c.State.Sleeps++
		return nil
	},
	Actions: rivet.Actions[State]{
		// Read-only: it changes the vars, not the state, so no view waits
		// for a commit.
		"view": rivet.Query(func(c *rivet.ActionCtx[State]) (View, error) {
			c.Vars().(*buffer).pending.Add(1)
			return view(c), nil
		}),
		"flush": rivet.Action0(func(c *rivet.ActionCtx[State]) (View, error) {
			flush(c)
			return view(c), nil
		}),
		"getState": rivet.Query(func(c *rivet.ActionCtx[State]) (View, error) { return view(c), nil }),
	},
}
