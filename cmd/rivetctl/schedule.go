package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
)

// argsLeftOut stands for the arguments of a scheduled call that a node
// left out of an Inspect response too large to carry every call's (the
// largest go first): arguments, a JSON array, are never empty otherwise.
const argsLeftOut = "(left out: the inspection was too large to carry every call's arguments)"

// formatArgs is a scheduled call's arguments as printed: as they are, or
// argsLeftOut.
func formatArgs(args []byte) string {
	if len(args) == 0 {
		return argsLeftOut
	}
	return printable(string(args))
}

// scheduleCommand lists and cancels an actor's scheduled calls: calls of
// its own actions it asked for at a later time (rivet.Scheduler).
func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "List or cancel an actor's scheduled calls (calls of its own actions at a later time)",
		RunE:  group,
	}
	list := &cobra.Command{
		Use:   "list ACTOR KEY",
		Short: "List an actor's pending scheduled calls, the earliest first",
		Args:  args(2, 2),
	}
	list.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		in, err := c.Actor(args[0], key...).NoCreate().Inspect(ctx)
		if err != nil {
			return err
		}
		if a.output == "json" {
			if in.Schedules == nil {
				in.Schedules = []client.ScheduledCall{}
			}
			return a.printValue(in.Schedules)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAT\tACTION\tARGS\tEVERY\tLAST RUN")
		for _, s := range in.Schedules {
			every := "-"
			if s.Every > 0 {
				every = s.Every.String()
			}
			if s.Cron != "" {
				every = s.Cron
			}
			last := "-"
			if !s.LastRun.IsZero() {
				last = formatTime(s.LastRun) + " " + lastOutcome(s.LastError)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(s.ID), formatTime(s.At), printable(s.Action), formatArgs(s.Args), printable(every), printable(last))
		}
		return tw.Flush()
	})
	cancel := &cobra.Command{
		Use:   "cancel ACTOR KEY ID",
		Short: "Remove one of an actor's scheduled calls (ID as schedule list shows it; every:NAME for a recurring one)",
		Long: `Remove one of an actor's pending scheduled calls, as an operator's decision:
for a call the actor has no action to cancel, such as a recurring call that
keeps failing. The actor's code is not consulted. Cancelling a call that
already ran, or was cancelled, changes nothing. A $destroy the actor asked
for is listed but cannot be cancelled.`,
		Example: `  rivetctl schedule cancel sessionActor alice 1796094126780-0a92244e48e5ffff
  rivetctl schedule cancel pageViews home every:flush`,
		Args: args(3, 3),
	}
	cancel.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		ok, err := c.Actor(args[0], key...).NoCreate().CancelScheduledCall(ctx, args[2])
		if err != nil {
			return err
		}
		if a.output == "json" {
			return a.printValue(map[string]bool{"cancelled": ok})
		}
		if !ok {
			_, err = fmt.Fprintf(a.stdout, "no pending call %s (it ran, or was cancelled)\n", printable(args[2]))
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "cancelled %s\n", printable(args[2]))
		return err
	})
	cmd.AddCommand(list, cancel)
	return cmd
}

// lastOutcome says how a recurring call's last run ended, on one line.
func lastOutcome(err string) string {
	if err == "" {
		return "ok"
	}
	if err = printable(oneLine(err)); len(err) > 80 {
		err = cutText(err, 77) // 80 bytes with its "..."
	}
	return "failed: " + err
}
