package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
)

// logLevelCommand reads or changes a node's log level while it runs: an
// on-call trial had to restart a node to see its debug lines, and then
// again to turn them off (when it remembered to).
func (a *app) logLevelCommand() *cobra.Command {
	var node string
	var all bool
	var lasting time.Duration
	cmd := &cobra.Command{
		Use:   "log-level [LEVEL]",
		Short: "Print a node's log level, or set it (debug, info, warn, error) while the node runs, for a while with --for",
		Long: `Print the log level of the node at --addr (another's with --node, every registered node's with
--all), or set it to LEVEL: debug, info, warn or error. A set prints the old level and the new one.

The level is each node's own and is not stored: a restart takes the node's --log-level again, and a
node started later does not get it (set it there too). With --for the node sets the level back by
itself once the duration has passed: to the level before, or, if an earlier --for is still pending,
to the level that one would have gone back to (a second --for does not make the first one's level
stay). A set without --for keeps its level and drops a pending revert. A node that stops applies a
pending revert first, so that it logs its stop at the level it went back to, and refuses a --for
from then on (UNAVAILABLE). The node logs each change, and each revert, at WARN.

The level governs the node's own logs and memberlist's (gossip). The embedded etcd's logs (and the
etcd client's) are kept to warnings and up whatever the level: debug does not show etcd's own debug
or info lines, while error hides its warnings too. gRPC's internal log is not the node's: it goes
to stderr as GRPC_GO_LOG_SEVERITY_LEVEL says.`,
		Example: `  rivetctl log-level
  rivetctl log-level debug --for 15m
  rivetctl log-level info --node node2
  rivetctl log-level --all
  rivetctl log-level debug --all --for 10m`,
		Args: args(0, 1),
	}
	cmd.Flags().StringVar(&node, "node", "", "the node `ID` whose level to print or set (rivetctl members lists them); the node at --addr asks it")
	cmd.Flags().BoolVar(&all, "all", false, "print or set the level of every registered node")
	cmd.Flags().DurationVar(&lasting, "for", 0, "with LEVEL: set the level back after `DURATION` (15m, 1h)")
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		level := ""
		if len(args) == 1 {
			if level = args[0]; level == "" {
				return usagef("LEVEL is empty: give debug, info, warn or error, or none to print the level")
			}
			// Checked here, not left to the nodes: with --all each node's
			// refusal read as "N of N did not answer", not as a typo.
			if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(level)) {
				return usagef("unknown log level %q: want one of debug, info, warn, error", level)
			}
		}
		if cmd.Flags().Changed("for") {
			switch {
			case level == "":
				return usagef("--for goes with a LEVEL to set for that long")
			case lasting <= 0:
				return usagef("--for must be positive, not %v", lasting)
			}
		}
		if cmd.Flags().Changed("node") && node == "" {
			return usagef("--node is empty: give a node's ID (rivetctl members lists them)")
		}
		if all && node != "" {
			return usagef("--node and --all go apart")
		}
		do := func(ctx context.Context, node string) (client.LogLevel, error) {
			if level == "" {
				return c.LogLevel(ctx, node)
			}
			return c.SetLogLevel(ctx, node, level, lasting)
		}
		if !all {
			ll, err := do(ctx, node)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printValue(ll)
			}
			_, err = fmt.Fprintf(a.stdout, "node %s: %s\n", printable(ll.NodeID), printable(describeLogLevel(ll)))
			return err
		}
		nodes, err := a.registeredNodes(ctx, c)
		if err != nil {
			return err
		}
		// A few at a time, as stats --all asks: a node that does not
		// answer must not take the others' time, and those that answer
		// are what an operator wants, printed before the command fails.
		levels, errs := askEach(nodes, func(node string) (client.LogLevel, error) { return do(ctx, node) })
		rows := make([]nodeLogLevel, len(nodes))
		for i := range nodes {
			rows[i].NodeID = nodes[i]
			if errs[i] != nil {
				rows[i].Error = describe(errs[i])
				continue
			}
			rows[i].LogLevel = &levels[i]
		}
		failed := 0
		for _, r := range rows {
			if r.LogLevel == nil {
				failed++
			}
		}
		if a.output == "json" {
			if rows == nil {
				rows = []nodeLogLevel{}
			}
			if err := a.printValue(rows); err != nil {
				return err
			}
		} else {
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tLEVEL")
			for _, r := range rows {
				what := "no answer: " + r.Error
				if r.LogLevel != nil {
					what = describeLogLevel(*r.LogLevel)
				}
				fmt.Fprintf(tw, "%s\t%s\n", printable(r.NodeID), printable(what))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		switch {
		case failed > 0 && level != "":
			return fmt.Errorf("%d of %d nodes did not answer: their level is unchanged, or unknown if the request reached them", failed, len(rows))
		case failed > 0:
			return fmt.Errorf("%d of %d nodes did not answer", failed, len(rows))
		}
		return nil
	})
	return cmd
}

// nodeLogLevel is one node's row of log-level --all: its level, or why it
// did not answer.
type nodeLogLevel struct {
	NodeID string `json:"node_id"`
	*client.LogLevel
	Error string `json:"error,omitempty"`
}

// describeLogLevel says a node's level, what it was before a set, and the
// revert pending: "info -> debug until 2026-12-06T11:05:00Z (then info)".
func describeLogLevel(ll client.LogLevel) string {
	s := ll.Level
	if ll.Previous != "" {
		s = ll.Previous + " -> " + ll.Level
	}
	if !ll.RevertAt.IsZero() {
		s += fmt.Sprintf(" until %s (then %s)", formatTime(ll.RevertAt), ll.RevertLevel)
	}
	return s
}
