package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
)

// hotCommand lists the busiest actors: an on-call trial saw a node's calls
// slow down, its metrics name the actor type, and nothing named the key.
func (a *app) hotCommand() *cobra.Command {
	var node string
	var all bool
	var limit int
	cmd := &cobra.Command{
		Use:   "hot",
		Short: "List the actors in memory with the most turns per second lately (the node at --addr's, another's with --node, or the whole cluster's with --all), the busiest first",
		Long: `List the actors in memory with the most turns (calls, sends, workflow steps and receives) per second
over the last 10 to 20 s, the busiest first: where a node's load goes, by key. WAITING is the turns
waiting for the actor's turn now and WAITED how long its turns have waited all told since it came
into memory (SINCE): a hot actor whose callers queue behind each other.`,
		Example: `  rivetctl hot
  rivetctl hot --all -n 20
  rivetctl hot --node node2 -o json`,
		Args: args(0, 0),
	}
	cmd.Flags().StringVar(&node, "node", "", "the node `ID` whose actors to list (rivetctl members lists them); the node at --addr asks it")
	cmd.Flags().BoolVar(&all, "all", false, "ask every registered node, and list the busiest of them all")
	cmd.Flags().IntVarP(&limit, "limit", "n", 10, "list at most `N` actors")
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
		if limit < 1 || limit > client.MaxHotActors {
			return usagef("--limit must be 1 to %d", client.MaxHotActors)
		}
		if cmd.Flags().Changed("node") && node == "" {
			return usagef("--node is empty: give a node's ID (rivetctl members lists them)")
		}
		if all && node != "" {
			return usagef("--node and --all go apart")
		}
		if !all {
			hot, err := c.HotActors(ctx, node, limit)
			if err != nil {
				return err
			}
			return a.printHot(hot)
		}
		nodes, err := a.registeredNodes(ctx, c)
		if err != nil {
			return err
		}
		// Asked at once, a few at a time, as stats --all does: one node
		// that does not answer must not take the others' time. Those
		// that answer are what an operator of a cluster in trouble
		// wants: listed, and the command fails after.
		lists, errs := askEach(nodes, func(node string) ([]client.HotActor, error) { return c.HotActors(ctx, node, limit) })
		var hot []client.HotActor
		failed := 0
		for i, err := range errs {
			if err != nil {
				a.note("node %s: %s", printable(nodes[i]), describe(err))
				failed++
				continue
			}
			hot = append(hot, lists[i]...)
		}
		slices.SortStableFunc(hot, func(x, y client.HotActor) int {
			return cmp.Or(cmp.Compare(y.TurnsPerSecond, x.TurnsPerSecond), cmp.Compare(y.Waiting, x.Waiting))
		})
		hot = hot[:min(limit, len(hot))]
		if failed == len(nodes) && failed > 0 {
			return fmt.Errorf("no node answered (%d asked)", failed)
		}
		if err := a.printHot(hot); err != nil {
			return err
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d nodes did not answer", failed, len(nodes))
		}
		return nil
	})
	return cmd
}

func (a *app) printHot(hot []client.HotActor) error {
	if a.output == "json" {
		if hot == nil {
			hot = []client.HotActor{}
		}
		return a.printValue(hot)
	}
	if len(hot) == 0 {
		a.note("no actor has had a turn")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTOR\tKEY\tNODE\tTURNS/S\tWAITING\tWAITED\tTURNS\tSINCE")
	for _, h := range hot {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%d\t%.3fs\t%d\t%s\n", printable(h.Name), formatKey(h.Key), printable(h.Node), h.TurnsPerSecond, h.Waiting, h.WaitedSeconds, h.Turns, formatTime(h.Since))
	}
	return tw.Flush()
}
