package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/typesets"
	"github.com/rivet-go/rivet/placement"
)

func (a *app) drainCommand() *cobra.Command {
	var (
		undo, force bool
		wait        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move every partition off NODE, so that it can be stopped with no interruption",
		Long: `Drain marks NODE as draining: every node leaves it out of its ring, so NODE
hands its partitions to the others, a few at a time (each one's turns finish
and its writes land before the next owner takes it). rivetctl shows the
progress and returns when NODE owns nothing. --undo ends a drain: NODE takes
its share of partitions again; it returns at once (--wait is for a drain;
--wait 0, "return at once", is accepted with --undo, as it is what an undo does).
A restart ends a drain too: NODE's next process starts undrained.

A drain is refused if the nodes that would take NODE's partitions (as the
ring places them: rendezvous hashing over the nodes alive, registered and
not draining) do not register every actor type NODE registers (rivetctl
members -o json lists each node's actor_types): actors of those types
moved there would not run (their calls fail, their workflows and timers
wait until the partition moves to a node that registers the type). Deploy the types to every node
first; --force drains all the same (a rolling deploy that removes a type,
once none of its actors is left: docs/deploy.md, "Adding or removing an
actor type"). A node already draining is not checked again.`,
		Args: args(1, 1),
	}
	cmd.Flags().BoolVar(&undo, "undo", false, "end the drain: the node takes its share again")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long to wait for the drain to finish (0: do not wait)")
	cmd.Flags().BoolVar(&force, "force", false, "drain even if the nodes that would take NODE's partitions do not register every actor type NODE does")
	cmd.RunE = a.runE(func() time.Duration {
		if undo {
			return 0 // an undo waits for nothing
		}
		return wait
	}, func(ctx context.Context, c *client.Client, args []string) error {
		node := args[0]
		if wait < 0 {
			// Refused before the drain is sent: a negative wait marked
			// NODE draining, then said at once that it "still owns" its
			// partitions "after -1s".
			return usagef("--wait must not be negative, not %s (0: do not wait)", wait)
		}
		if undo && cmd.Flags().Changed("wait") && wait != 0 {
			// An undo has no end to wait for (no count tells when NODE
			// has its share back): ignoring --wait would return at once
			// to whoever asked it to wait. --wait 0 asks for just that
			// (a script that always passes --wait, 0 with --undo).
			return usagef("--wait makes no sense with --undo (an undo returns once %s is no longer draining; rivetctl members shows its partitions come back)", node)
		}
		if undo && force {
			// --force is the drain's, past the check of actor types: an
			// undo moves partitions back onto node, which its drain
			// checked nothing of.
			return usagef("--force makes no sense with --undo (it drains past the check of actor types; an undo is not checked)")
		}
		if !undo {
			if err := a.checkDrainTypes(ctx, c, node, force); err != nil {
				return err
			}
		}
		start, err := c.Drain(ctx, node, undo)
		if err != nil {
			return err
		}
		if undo || wait == 0 {
			verb := "draining"
			if undo {
				verb = "no longer draining"
			}
			if a.output == "json" {
				return a.printValue(map[string]any{"node": node, "draining": !undo, "owned": start})
			}
			if undo {
				// A drained node owns none: "owned 0" read as if the
				// undo had failed. Its share comes back with the
				// rebalance that follows.
				_, err := fmt.Fprintf(a.stdout, "%s is %s (it owns %d partitions now; its share comes back as the cluster rebalances: rivetctl members shows it)\n", node, verb, start)
				return err
			}
			_, err := fmt.Fprintf(a.stdout, "%s is %s (owned %d partitions)\n", node, verb, start)
			return err
		}
		// The bar is for people: with --output json stderr holds JSON only.
		// Nor is it for a log or a pipe (2>log), which would keep every
		// frame the bar redraws with \r: they get a few plain lines.
		barOut := a.stderr
		plain := a.output != "json" && !isTerminal(a.stderr)
		if a.output == "json" || plain {
			barOut = io.Discard
		}
		if plain {
			fmt.Fprintf(a.stderr, "draining %s: %d partitions to move\n", node, start)
		}
		lastOwned, lastLine := start, time.Now()
		bar := progressbar.NewOptions(int(start),
			progressbar.OptionSetWriter(barOut),
			progressbar.OptionSetDescription("draining "+node),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		t0 := time.Now()
		// --wait bounds the drain; the command's deadline has --timeout
		// on top, for the looks at the member list (a look that outlasts
		// it is a node that does not answer).
		waited := time.NewTimer(wait)
		defer waited.Stop()
		for {
			owned, state, err := ownedBy(ctx, c, node)
			// A node that died during its drain: what it owns moves by
			// failover once its lease runs out, not by the drain's
			// handoff; "drained" said otherwise (a cluster trial killed
			// a node during its drain). One that was stopped meanwhile
			// (left) gives its partitions up as it stops: the drain
			// waits for that as for a handoff.
			switch {
			case errors.Is(err, errNotMember):
				_ = bar.Exit()
				return &runError{err: fmt.Errorf("%s is no longer a member: it stopped during the drain, and its partitions moved with its stop or by failover, not by the drain's handoff (rivetctl members shows where they went)", node), code: "UNAVAILABLE"}
			case err != nil:
				return err
			case state == "dead":
				_ = bar.Exit()
				return &runError{err: fmt.Errorf("%s looks dead to the node answering: it stopped answering during the drain, so its partitions (%d of %d still its own) move by failover once its lease runs out, not by the drain's handoff (rivetctl members shows where they go)", node, owned, start), code: "UNAVAILABLE"}
			}
			if owned > start {
				// It still takes partitions back (a drain right after an
				// undo): they are to move too, and "X of its Y" with X
				// above Y read as nonsense.
				start = owned
				bar.ChangeMax(int(start))
			}
			_ = bar.Set(int(start - owned))
			// At most a line per plainEvery, and only for progress: a
			// long drain's log shows it moves, a short one's stays one line.
			if plain && owned != 0 && owned != lastOwned && time.Since(lastLine) >= plainEvery {
				fmt.Fprintf(a.stderr, "draining %s: %d of %d partitions left\n", node, owned, start)
				lastOwned, lastLine = owned, time.Now()
			}
			if owned == 0 {
				_ = bar.Finish()
				took := time.Since(t0).Round(10 * time.Millisecond)
				if a.output == "json" {
					return a.printValue(map[string]any{"node": node, "drained": true, "moved": start, "seconds": took.Seconds()})
				}
				_, err := fmt.Fprintf(a.stdout, "drained %s: %d partitions moved in %s\n", node, start, took)
				return err
			}
			select {
			case <-waited.C:
				// Not the deadline's "no answer": the node answered, the
				// drain is slow. It goes on; the bar's line ends first.
				_ = bar.Exit()
				return &runError{err: fmt.Errorf("%s still owns %d of its %d partitions after %s (--wait); it stays draining (rivetctl drain --undo %s ends that)", node, owned, start, wait, node), code: "DEADLINE_EXCEEDED"}
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return cmd
}

// plainEvery is how often a drain whose stderr is no terminal says how
// many partitions are left (a variable for tests).
var plainEvery = 10 * time.Second

// isTerminal reports whether w is a terminal, where a progress bar can
// redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// errNotMember is ownedBy's error for a node not in the member list.
var errNotMember = errors.New("not a member of the cluster")

// ownedBy returns how many partitions node owns, and its gossip state.
func ownedBy(ctx context.Context, c *client.Client, node string) (uint32, string, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return 0, "", err
	}
	for _, m := range ms {
		if m.NodeID == node {
			return m.PartitionsOwned, m.State, nil
		}
	}
	return 0, "", fmt.Errorf("node %s is %w", node, errNotMember)
}

// checkDrainTypes refuses (unless force) a drain of node whose partitions
// would go to nodes that do not register every actor type node does: their
// actors would not run there. Only the nodes that would take some of
// node's partitions are checked (drainTakers); none (node alone, or in no
// ring), no check. With force, or when it cannot tell (node, or a node
// that would take some of its partitions, of a build that does not publish
// its types), it says so in a note and lets the drain go. A node already
// draining is not checked again (drain run again to wait for it). The node answering does
// not check: a client other than rivetctl drains regardless.
func (a *app) checkDrainTypes(ctx context.Context, c *client.Client, node string, force bool) error {
	ms, err := c.Members(ctx)
	if err != nil {
		return err
	}
	byID := map[string]client.Member{}
	for _, m := range ms {
		byID[m.NodeID] = m
	}
	target, ok := byID[node]
	if !ok || target.Draining {
		// Unknown: the node answers what it answers of it. Draining: its
		// partitions are on their way already, checked when its drain
		// began (drain run again to wait for it).
		return nil
	}
	tab, err := c.Partitions(ctx)
	if err != nil {
		return err
	}
	takers, total := drainTakers(ms, node, tab.Count)
	if len(takers) == 0 {
		return nil // no partition of node's would move: nothing to check
	}
	if !target.TypesKnown() {
		a.note("cannot tell which actor types %s registers (a build that does not say); not checked", node)
		return nil
	}
	var lacking, unknown []string
	missing := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(takers)) {
		m := byID[id]
		if !m.TypesKnown() {
			unknown = append(unknown, id)
			continue
		}
		if miss := typesets.Missing(target.ActorTypes, m.ActorTypes); len(miss) > 0 {
			lacking = append(lacking, fmt.Sprintf("%s lacks %s and would take %d of %s's %d partitions", id, strings.Join(miss, ", "), takers[id], node, total))
			for _, t := range miss {
				missing[t] = true
			}
		}
	}
	if len(unknown) > 0 {
		a.note("cannot tell whether %s, which would take some of %s's partitions, %s every actor type %s does: a build that does not say which it registers", typesets.List(unknown), node, plural(len(unknown), "registers", "register"), node)
	}
	if len(lacking) == 0 {
		return nil
	}
	types := slices.Sorted(maps.Keys(missing))
	what := fmt.Sprintf("the nodes that would take %s's partitions do not register every actor type it does (%s): actors of %s moved there would not run (their calls fail, their workflows and timers wait until their partition moves to a node that registers the type)", node, strings.Join(lacking, "; "), strings.Join(types, ", "))
	if force {
		a.note("draining %s all the same (--force): %s", node, what)
		return nil
	}
	return &runError{err: fmt.Errorf("refused to drain %s: %s; deploy the types to every node first (docs/deploy.md, \"Adding or removing an actor type\"), or drain with --force", node, what), code: "FAILED_PRECONDITION"}
}

// drainTakers returns the nodes that would take some of node's partitions
// were it drained, each with how many, and how many partitions (of parts)
// the ring gives node now. The ring is the nodes' own (rendezvous hashing
// over the nodes alive, registered and not draining; placement.Owner): a
// partition the ring gives node goes to its owner in the ring without
// node. When no other node is in the ring, the nodes fall back to a ring
// over the draining ones, node among them: a partition that ring gives
// another goes there, one it gives node stays. A node outside the ring
// (not alive, not registered) is given nothing: its drain moves nothing.
func drainTakers(ms []client.Member, node string, parts uint32) (takers map[string]int, total int) {
	var ring, draining []string
	for _, m := range ms {
		if m.StartedAt.IsZero() || m.State != "alive" {
			continue // not registered, or not alive in gossip: in no ring
		}
		if m.Draining {
			draining = append(draining, m.NodeID)
		} else {
			ring = append(ring, m.NodeID)
		}
	}
	if !slices.Contains(ring, node) {
		return nil, 0
	}
	// The ring as the nodes' balancers make it (placement.Ring), before
	// the drain and after it.
	rest, _ := placement.Ring(slices.DeleteFunc(slices.Clone(ring), func(id string) bool { return id == node }), append(draining, node))
	ring, _ = placement.Ring(ring, nil)
	takers = map[string]int{}
	for p := range parts {
		if placement.Owner(p, ring) != node {
			continue
		}
		total++
		if to := placement.Owner(p, rest); to != node {
			takers[to]++
		}
	}
	return takers, total
}
