package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
)

// watchForever stands for "until interrupted" in the command's deadline.
const watchForever = 100 * 365 * 24 * time.Hour

// watchCommand prints an actor's events as they are broadcast.
func (a *app) watchCommand() *cobra.Command {
	var (
		count int
		dur   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch ACTOR KEY [EVENT...]",
		Short: "Print the events an actor broadcasts, as they come (all of them, or those named)",
		Long: `watch subscribes to an actor's events and prints each one as it is
broadcast, one line each: the event's name and its JSON (with --output json,
{"name":...,"data":...}). An event leaves the actor's node once the turn that
broadcast it is durable. Events are not stored: watch shows those broadcast
while it runs. When the stream breaks (the actor moves to another node, its
node stops) watch says so on stderr at once, subscribes again (for up to
30 s) and prints a gap line ({"gap":true}) once it has: events in between
may be missing. It runs until interrupted, --count events, or --for; with
--for it exits 1 if it ends with the stream down, or before --count events.
--timeout bounds the subscribing only. The actor must exist (watch does not
create it).`,
		Example: `  rivetctl watch counter main
  rivetctl watch counter main newCount --count 1
  rivetctl -o json watch counter main --for 30s`,
		Args: args(2, -1),
	}
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many events (0: no limit)")
	cmd.Flags().DurationVar(&dur, "for", 0, "exit after this long (0: until interrupted)")
	cmd.RunE = a.runE(func() time.Duration {
		if dur > 0 {
			return dur
		}
		return watchForever
	}, func(ctx context.Context, c *client.Client, args []string) error {
		if count < 0 || dur < 0 {
			return usagef("--count and --for must not be negative")
		}
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		// broken is set while the stream is down and being made again.
		var broken atomic.Bool
		subCtx, cancel := context.WithTimeout(ctx, a.timeout)
		sub, err := c.Actor(args[0], key...).NoCreate().SubscribeWith(subCtx, client.SubscribeOptions{
			Events: args[2:],
			OnBreak: func(err error) {
				broken.Store(true)
				msg := fmt.Sprintf("the stream broke (%s); subscribing again", oneLine(describe(err)))
				if a.output == "json" {
					a.note("%s", msg)
					return
				}
				fmt.Fprintln(a.stderr, "rivetctl: "+printable(msg))
			},
		})
		// The error too: the node sees the deadline (it travels with the
		// call) and may reset the stream before the local timer fires.
		timedOut := (errors.Is(err, context.DeadlineExceeded) || errors.Is(subCtx.Err(), context.DeadlineExceeded)) && ctx.Err() == nil
		cancel()
		if err != nil {
			if timedOut {
				// --timeout bounds the subscribing: the command's own
				// deadline (--for, or a hundred years) would be named.
				return a.deadlineError(err, a.timeout, "")
			}
			return err
		}
		defer sub.Close()
		var until <-chan time.Time
		if dur > 0 {
			t := time.NewTimer(dur)
			defer t.Stop()
			until = t.C
		}
		waitCtx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-until:
				stop()
			case <-waitCtx.Done():
			}
		}()
		for n := 0; count == 0 || n < count; {
			ev, err := sub.Next(waitCtx)
			if err != nil {
				if waitCtx.Err() != nil && ctx.Err() == nil {
					// --for ran out: a failure if the stream was down
					// then, or --count was not reached.
					switch {
					case broken.Load():
						return &runError{err: fmt.Errorf("--for ended while the stream was down (subscribing again): events may be missing")}
					case count > 0:
						return &runError{err: fmt.Errorf("%d of --count %d events within --for %s", n, count, dur)}
					}
					return nil
				}
				if errors.Is(err, context.Canceled) {
					return nil // interrupted
				}
				return err
			}
			if ev.Gap {
				broken.Store(false)
			}
			if err := a.printEvent(ev); err != nil {
				return err
			}
			if !ev.Gap {
				n++
			}
		}
		return nil
	})
	return cmd
}

// printEvent prints one event on a line of its own.
func (a *app) printEvent(ev client.Event) error {
	var line []byte
	if a.output == "json" {
		var v any = struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		}{ev.Name, ev.Data}
		if ev.Gap {
			v = map[string]bool{"gap": true}
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		line = printableJSON(b)
	} else if ev.Gap {
		line = []byte("-- gap: subscribed again (the actor moved or its node stopped); events may be missing")
	} else {
		var buf bytes.Buffer
		data := []byte(printable(string(ev.Data)))
		if json.Compact(&buf, ev.Data) == nil {
			data = printableJSON(buf.Bytes())
		}
		line = fmt.Appendf(nil, "%s %s", printable(ev.Name), data)
	}
	_, err := a.stdout.Write(append(line, '\n'))
	return err
}
