package workflowtest

import (
	"context"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// Replay checks fn, the workflow code about to be deployed, against a
// history a node recorded (x: `rivetctl history ACTOR KEY --raw`, or the
// client's ActorHandle.ExportHistory), as Temporal's WorkflowReplayer
// does. It runs fn as the node would run it after the deploy, from the
// start, and returns:
//
//   - nil if fn replays every entry it reaches, up to where the history
//     ends: the first thing fn would do that the history does not hold (a
//     step, sleep, receive, join or race not recorded yet, a recorded step
//     to retry, a completion, a recorded sleep that ends after
//     x.ExportedAt), or the workflow's end;
//   - the *workflow.DivergenceError the node would fail the run with (fn
//     reaches the entries in another order or under other names than
//     recorded: gate the change with Ctx.GetVersion; or a name used twice
//     in one scope, its Reused set: give each entry a name of its own), or a
//     *workflow.DecodeError (a recorded value fn can no longer read);
//   - any other failure the run would end with: a panic of fn's, or the
//     recorded failure that a run that failed replays to (compare with
//     x.WorkflowError).
//
// Nothing runs that the history does not hold, so nothing has an effect:
// recorded steps return their recorded outputs, and no step body, Do
// body or rollback handler runs, no message is taken or answered. So the
// replay needs no actor state (only step bodies touch it), and it checks
// nothing past the history's end: code after it runs fresh in that run
// and cannot diverge there. Join and race branches replay each up to
// their own end. Ctx.Now before the first entry, and the clock of every
// wait, stand still at x.ExportedAt.
//
// What a replay does not run is not checked, as on a node (workflow
// package, rule 8): a settled join or race and a completed loop return
// their recorded results without running their code. A run that fails
// does not roll back here: Replay returns its failure.
func Replay[S any](ctx context.Context, x *workflow.HistoryExport, fn func(*workflow.Ctx[S]) error) error {
	hist, err := x.History()
	if err != nil {
		return err
	}
	now := x.ExportedAt
	if now.IsZero() {
		for _, e := range hist {
			now = later(now, e.Time)
		}
	}
	return workflow.CheckHistory(ctx, NewClock(now), x.Actor, x.Key, hist, func(ctx context.Context, h workflow.Host, hist []workflow.Entry) workflow.Outcome {
		return workflow.Run(ctx, fn, h, hist)
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
