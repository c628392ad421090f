package main

import (
	"context"
	"fmt"

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
		Short: "Exit 0 if the node at --addr serves (gRPC health SERVING), 1 if not",
		Args:  args(0, 0),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
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
