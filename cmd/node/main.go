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
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed, and asking for it is no failure
		}
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := node.ParseFlags("node", args, os.Stderr)
	if err != nil {
		return err
	}
	reg, err := examples.Registry()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return node.Run(ctx, cfg, reg)
}
