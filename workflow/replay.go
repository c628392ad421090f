package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/rivet-go/rivet/caller"
)

// ReplayOnlyHost is an optional interface of a Host. A host whose
// ReplayOnly says true only checks code against a history (as
// workflowtest.Replay does with a history exported from a node): the run
// replays what the history holds, and where a part of it (the workflow's
// function, a join or race branch) would do anything the history does not
// hold, that part stops there, as if it waited for ever. The host is then
// never asked to run a step's body or a rollback handler (RunStep), to run
// a Do step's body, to take or complete a message (Receive, Complete), or
// to commit a new sleep, receive, join, race or loop (Commit); history-only
// commits of what a replay records as it passes (a version gate, a Removed
// placeholder, a rollback checkpoint, a sleep that ended, a loop's
// progress) are accepted and not passed on. Once every part is stopped or
// waits, the host hears of it (Waiting) and should end the run (cancel its
// context): it yields. A run that fails does not roll back: its failure is
// the outcome.
type ReplayOnlyHost interface {
	ReplayOnly() bool
}

// errReplayEnd stops a replay-only run that reached the end of its
// history: it yields, as an evicted run does.
var errReplayEnd = fmt.Errorf("workflow: replay reached the end of the history: %w", ErrEvicted)

// replayHost is the Host a replay-only run talks to: it passes time, the
// actor and Waiting through to the caller's host, and parks every call that
// would do what the history does not hold.
type replayHost struct {
	Host
	r *run
	// recorded holds the paths of the history the run was given.
	recorded map[string]bool
}

func newReplayHost(h Host, r *run, history []Entry) *replayHost {
	rh := &replayHost{Host: h, r: r, recorded: make(map[string]bool, len(history))}
	for i := range history {
		rh.recorded[history[i].Path] = true
	}
	return rh
}

// park stops the calling part of the run until ctx (its thread's) is done:
// it counts as blocked meanwhile, so that the host hears when every part
// is. It returns errReplayEnd if the run was stopped, else ctx's error (a
// race branch that lost, a join sibling of a branch that failed).
func (h *replayHost) park(ctx context.Context) error {
	r := h.r
	r.mu.Lock()
	r.active--
	r.parked[ctx]++
	r.reportLocked()
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	r.active++
	if r.parked[ctx]--; r.parked[ctx] == 0 {
		delete(r.parked, ctx)
	}
	r.mu.Unlock()
	if r.ctx.Err() != nil {
		return errReplayEnd
	}
	return ctx.Err()
}

// RunStep parks: a step body or rollback handler to run is past what the
// history holds.
func (h *replayHost) RunStep(ctx context.Context, _ bool, _ func(StepEnv) []HistoryWrite) error {
	return h.park(ctx)
}

// Commit accepts what a replay records as it passes and parks at anything
// new that the code does: an entry the history does not hold, other than
// a marker that records no work.
func (h *replayHost) Commit(ctx context.Context, writes []HistoryWrite) error {
	for _, w := range writes {
		if w.Put == nil || h.recorded[w.Put.Path] {
			continue
		}
		switch w.Put.Kind {
		case KindVersionCheck, KindRemoved, KindRollbackCheckpoint, KindJoinOutputs, KindHeldBranch:
			// No work: a join's outputs are what its replayed
			// branches returned, a held failure what one of them
			// returned.
		default:
			return h.park(ctx)
		}
	}
	return nil
}

// Receive parks: a receive that takes messages is past what the history
// holds.
func (h *replayHost) Receive(ctx context.Context, _ []string, _ int, _ func([]RawMessage) []HistoryWrite) ([]RawMessage, error) {
	return nil, h.park(ctx)
}

// Complete parks: a completion not recorded would answer a sender.
func (h *replayHost) Complete(ctx context.Context, _ uint64, _ json.RawMessage, _ []HistoryWrite) error {
	return h.park(ctx)
}

// replayOnly reports whether host only checks code against a history.
func replayOnly(host Host) bool {
	ro, ok := host.(ReplayOnlyHost)
	return ok && ro.ReplayOnly()
}

// CheckHistory runs a workflow's code against its history as a replay-only
// run (ReplayOnlyHost) whose time is clock's, and returns what a host's
// run of that code would fail with: nil if the code replays every entry
// it reaches, up to where the history ends or the workflow does; else the
// *DivergenceError, the *DecodeError, the panic, or the recorded failure
// that a failed run replays to. Nothing the history does not hold runs
// (see ReplayOnlyHost). start runs the code on a host and history (Run,
// with the code's fn); name and key are the actor's, as Ctx reads them.
// It returns ctx's error once ctx is done, even if the code has not
// stopped.
func CheckHistory(ctx context.Context, clock Clock, name string, key []string, history []Entry, start func(context.Context, Host, []Entry) Outcome) error {
	ch := &checkHost{Clock: clock, name: name, key: key, notify: make(chan struct{}), end: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan Outcome, 1)
	go func() { done <- start(rctx, ch, history) }()
	var out Outcome
	ended := false
	select {
	case out = <-done:
	case <-ch.end:
		ended = true
		cancel()
		out = <-done
	case <-ctx.Done():
		// The code blocks outside the engine's calls (a lock, a channel,
		// I/O outside a step), which no cancel ends: its goroutine is
		// left to return when the code does, as a real run of that code
		// would stall too, and the caller is answered now.
		return ctx.Err()
	}
	switch out.Status {
	case RunFailed:
		return out.Err
	case RunYielded:
		if !ended && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// errCheckHost is what a checkHost says if the engine asked it to do
// anything: it never does (the engine's replayHost stands in front).
var errCheckHost = errors.New("workflow: a replay check runs, commits and takes nothing")

// checkHost is CheckHistory's host: replay-only, its run ending once every
// part of it stopped at the history's end or waits.
type checkHost struct {
	Clock
	name   string
	key    []string
	notify chan struct{} // never closed: no message comes
	once   sync.Once
	end    chan struct{}
}

var _ ReplayOnlyHost = (*checkHost)(nil)

func (h *checkHost) ReplayOnly() bool { return true }

func (h *checkHost) Actor() (string, []string) { return h.name, append([]string(nil), h.key...) }

func (h *checkHost) Waiting(Wake) { h.once.Do(func() { close(h.end) }) }

func (h *checkHost) MessageNotify() <-chan struct{} { return h.notify }

func (h *checkHost) Client() caller.Client { return nil }

func (h *checkHost) RunStep(context.Context, bool, func(StepEnv) []HistoryWrite) error {
	return errCheckHost
}

func (h *checkHost) Commit(context.Context, []HistoryWrite) error { return errCheckHost }

func (h *checkHost) Receive(context.Context, []string, int, func([]RawMessage) []HistoryWrite) ([]RawMessage, error) {
	return nil, errCheckHost
}

func (h *checkHost) Complete(context.Context, uint64, json.RawMessage, []HistoryWrite) error {
	return errCheckHost
}
