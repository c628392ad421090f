package workflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/rivet-go/rivet/caller"
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
	rh := &replayer{clock: NewClock(now), name: x.Actor, key: x.Key, notify: make(chan struct{}), end: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan workflow.Outcome, 1)
	go func() { done <- workflow.Run(rctx, fn, rh, hist) }()
	var out workflow.Outcome
	ended := false
	select {
	case out = <-done:
	case <-rh.end:
		ended = true
		cancel()
		out = <-done
	}
	switch out.Status {
	case workflow.RunFailed:
		return out.Err
	case workflow.RunYielded:
		if !ended && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errReplayHost is what the replayer says if the engine asked it to do
// anything: it never does (workflow.ReplayOnlyHost).
var errReplayHost = errors.New("workflowtest: a replay runs, commits and takes nothing")

// replayer is the workflow.Host of Replay: a replay-only host, whose run
// ends once every part of it stopped at the history's end or waits.
type replayer struct {
	clock  *Clock
	name   string
	key    []string
	notify chan struct{} // never closed: no message comes
	once   sync.Once
	end    chan struct{}
}

var _ workflow.ReplayOnlyHost = (*replayer)(nil)

func (r *replayer) ReplayOnly() bool { return true }

func (r *replayer) Now() time.Time { return r.clock.Now() }

func (r *replayer) Timer(at time.Time) (<-chan time.Time, func()) { return r.clock.Timer(at) }

func (r *replayer) Actor() (string, []string) { return r.name, append([]string(nil), r.key...) }

func (r *replayer) Waiting(workflow.Wake) { r.once.Do(func() { close(r.end) }) }

func (r *replayer) MessageNotify() <-chan struct{} { return r.notify }

func (r *replayer) Client() caller.Client { return nil }

func (r *replayer) RunStep(context.Context, bool, func(workflow.StepEnv) []workflow.HistoryWrite) error {
	return errReplayHost
}

func (r *replayer) Commit(context.Context, []workflow.HistoryWrite) error { return errReplayHost }

func (r *replayer) Receive(context.Context, []string, int, func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	return nil, errReplayHost
}

func (r *replayer) Complete(context.Context, uint64, json.RawMessage, []workflow.HistoryWrite) error {
	return errReplayHost
}
