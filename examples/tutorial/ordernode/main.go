// Command ordernode is the node of the tutorial (docs/tutorial.md): a
// rivet node hosting the order actor, with cmd/node's flags.
package main

import (
	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/tutorial/order"
	"github.com/rivet-go/rivet/node"
)

func main() {
	// The flags and RIVET_* variables of cmd/node (-h lists them);
	// SIGTERM or Ctrl-C stops the node gracefully.
	node.Main(rivet.MustSetup(order.Actor))
}
