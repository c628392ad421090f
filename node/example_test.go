package node_test

import (
	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node"
)

type tally struct {
	N int `json:"n"`
}

// A node binary hosting your own actors, configured by cmd/node's flags and
// RIVET_* variables.
func ExampleMain() {
	counter := rivet.Actor[tally]{
		Name: "tally",
		Actions: rivet.Actions[tally]{
			"add": rivet.Action(func(c *rivet.ActionCtx[tally], by int) (int, error) {
				c.State.N += by
				return c.State.N, nil
			}),
		},
	}
	node.Main(rivet.MustSetup(counter))
}
