// Command node runs a rivet node hosting the example actors. Alone it needs
// nothing else (an embedded etcd keeps its data in ./data):
//
//	go run ./cmd/node
//
// Every flag has an environment equivalent: --grpc-addr is RIVET_GRPC_ADDR
// (node.ParseFlags). A binary hosting your own actors is one line on the
// same flags: node.Main(rivet.MustSetup(yourActors...)).
package main

import (
	"io"
	"os"

	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
)

func main() {
	// Each error once: a flag's on one line (ParseFlags writes it),
	// any other prefixed "node: " once (the node package's own errors
	// start so already).
	os.Exit(node.ExitStatus(os.Stderr, "node", run(os.Args[1:], os.Stderr)))
}

// run runs the node until a signal stops it; the usage, and a flag that
// does not parse, go to stderr.
//
// It is node.RunMain's body, not a call of it, for two differences:
// RunMain names the program after os.Args[0], which is "rivet-node" in the
// image and the Makefile's build, so a flag's error and the usage would
// say rivet-node where main's ExitStatus writes the other errors as
// "node: ..." (the node package's own start so already; with node.Main,
// which passes ExitStatus that name too, a busy port read "rivet-node:
// node: grpc listen: ..."); and RunMain writes to os.Stderr, where run
// takes the writer its tests read.
func run(args []string, stderr io.Writer) error {
	cfg, err := node.ParseFlags("node", args, stderr)
	if err != nil {
		return err
	}
	reg, err := examples.Registry()
	if err != nil {
		return err
	}
	node.SetMemoryLimit(cfg.Logger)
	ctx, stop := node.SignalContext()
	defer stop()
	return node.Run(ctx, cfg, reg)
}
