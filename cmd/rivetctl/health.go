package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
)

// healthCommand is the probe a container's health check runs (images have
// no shell or curl): exit 0 when the node at --addr serves. The health
// service needs no token, but a node with TLS needs the TLS flags (and
// under mTLS a certificate) like any other call.
func (a *app) healthCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the node at --addr serves (gRPC health SERVING), 1 if not; with several, each of them",
		Args:  args(0, 0),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
		if addrs := client.SplitEndpoints(a.addr); len(addrs) > 1 {
			return a.healthOfEach(ctx, addrs)
		}
		ok, err := c.Healthy(ctx)
		if err != nil {
			return err
		}
		if !ok {
			// UNAVAILABLE, as gRPC's own health clients read NOT_SERVING:
			// --output json said UNKNOWN.
			return &runError{err: fmt.Errorf("%s is not serving", a.addr), code: "UNAVAILABLE"}
		}
		if a.output == "json" {
			return a.printValue(map[string]bool{"serving": true})
		}
		_, err = fmt.Fprintln(a.stdout, "serving")
		return err
	})
	return cmd
}

// healthOfEach checks every node of a list, each on a connection of its
// own, side by side: with one client over the list, health answered for
// whichever node it reached, "serving" with the first one down (a cluster
// trial). Exit 0 only if every one serves.
func (a *app) healthOfEach(ctx context.Context, addrs []string) error {
	type result struct {
		Addr    string `json:"addr"`
		Serving bool   `json:"serving"`
		Error   string `json:"error,omitempty"`
	}
	results := make([]result, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		results[i].Addr = addr
		wg.Go(func() {
			c, err := client.New(addr, a.clientOptions()...)
			if err != nil {
				results[i].Error = err.Error()
				return
			}
			defer c.Close()
			ok, err := c.Healthy(ctx)
			switch {
			case err != nil:
				results[i].Error = describe(err)
			case !ok:
				results[i].Error = "not serving"
			}
			results[i].Serving = ok && err == nil
		})
	}
	wg.Wait()
	var down []string
	for _, r := range results {
		if !r.Serving {
			down = append(down, r.Addr)
		}
	}
	if a.output == "json" {
		if err := a.printValue(map[string]any{"serving": len(down) == 0, "nodes": results}); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			line := r.Addr + "  serving"
			if !r.Serving {
				line = r.Addr + "  " + r.Error
			}
			if _, err := fmt.Fprintln(a.stdout, line); err != nil {
				return err
			}
		}
	}
	if len(down) > 0 {
		return &runError{err: fmt.Errorf("%d of %d nodes not serving: %s", len(down), len(addrs), strings.Join(down, ", ")), code: "UNAVAILABLE"}
	}
	return nil
}
