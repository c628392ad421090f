package workflowtest

import (
	"context"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
)

// Attempt markers (workflow.AttemptMarker), as a node keeps them
// (runtime/attempts.go), so that a test that crashes its host while a step
// body runs (Crash, or CrashAt at the commit of the attempt's record) sees
// the attempt counted as a node counts it: the next run records it as
// failed (workflow.AbandonedAttemptMessage), exhausted if it was the
// step's last, and runs the step again as attempt n+1. Without them such a
// step ran again as attempt 1 for ever.
//
// The rules are the node's:
//   - A run (one Run, an activation here) marks the bodies that start
//     before any marked attempt of its own has recorded its end: the first
//     step body of the run and the Do bodies that start beside it, at most
//     maxRunMarks. Ephemeral steps and rollback handlers are not marked
//     (the engine does not ask).
//   - A marker is written before the body starts and is durable at once.
//     It is not a commit: CrashAt and FailCommit do not count it, so that
//     the commits a test numbers are the same with markers as without.
//   - The commit that records the step's attempt (or the abandoned
//     attempt) deletes its marker; one that deletes a tree (a race's
//     losers, a pruned iteration) deletes the markers under it. A commit
//     that does not apply (CrashAt before, FailCommit) deletes nothing.
//   - A run that completes or fails deletes every marker, as a node's
//     record of the workflow's end does. SetHistory, which rewrites the
//     history as a node's retry does, deletes them too.
//   - A run evicted (its ctx cancelled: DriveOptions.Evict or Stop, a run
//     waiting for messages, a test's own cancel) is the host's graceful
//     stop: it deletes the markers of its own bodies that recorded
//     nothing (cut off by the eviction), which are not counted, as a
//     node's graceful leave does not count the bodies its StepGrace cut
//     off. A crash (Crash, CrashAt) or a failed commit deletes nothing.
//   - Drive simulates a node's idle unload twice. A run that waits for
//     messages only is evicted at once (a node waits IdleTimeout), and
//     the run Drive starts when they are queued, or the test's next
//     Drive, is a new run: the first body after the receive is marked.
//     A run that waits on the clock stays (unless DriveOptions.Evict
//     says otherwise), and a wait a node would unload it for restarts
//     its marking in place (wakeIdleLocked).

func init() {
	hosthook.NoAttemptMarkers = func(h any) { h.(interface{ noAttemptMarkers() }).noAttemptMarkers() }
}

// noAttemptMarkers turns the host's markers off, for the engine's crash
// simulations (hosthook.NoAttemptMarkers says why).
func (h *Host[S]) noAttemptMarkers() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noMarks = true
}

// maxRunMarks bounds the markers of one run, as on a node.
const maxRunMarks = 64

// attemptMark is a marker: the attempt of a step body that started at at.
type attemptMark struct {
	attempt int
	at      time.Time
}

// markEntry is a marker the activation knows, by its step's path: own
// says its run wrote it, not that Run read it (that one is an attempt
// abandoned by an earlier activation).
type markEntry struct {
	attemptMark
	own bool
}

var _ workflow.AttemptMarker = (*activation[struct{}])(nil)

// MarkAttempt implements workflow.AttemptMarker: while the run has not seen
// a marked attempt record its end, the body's attempt is marked.
func (a *activation[S]) MarkAttempt(path string, attempt int, at time.Time) error {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.dead {
		// The body must not start: its node is gone.
		return ErrCrash
	}
	if !a.marking {
		return nil
	}
	if a.markedN++; a.markedN > maxRunMarks {
		return nil
	}
	m := attemptMark{attempt: attempt, at: at}
	h.marks[path] = m
	a.marks[path] = markEntry{attemptMark: m, own: true}
	return nil
}

// AbandonedAttempt implements workflow.AttemptMarker: a marker Run read (its
// attempt started in an earlier activation) that no commit has deleted.
func (a *activation[S]) AbandonedAttempt(path string) (int, time.Time, bool) {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	m, ok := a.marks[path]
	if !ok || m.own {
		return 0, time.Time{}, false
	}
	return m.attempt, m.at, true
}

// loadMarksLocked gives a new activation the stored markers, and starts
// its run's marking.
func (a *activation[S]) loadMarksLocked() {
	if a.h.noMarks {
		return // marking nothing, none loaded: as a host without them
	}
	a.marks = make(map[string]markEntry, len(a.h.marks))
	for p, m := range a.h.marks {
		a.marks[p] = markEntry{attemptMark: m}
	}
	a.marking = true
}

// applyMarksLocked deletes the markers batch supersedes: those of the
// steps whose entries it puts (once the entry counts the marked attempt)
// and those under the trees it deletes. Called as batch applies.
func (a *activation[S]) applyMarksLocked(batch []workflow.HistoryWrite) {
	if len(a.marks) == 0 {
		return
	}
	h := a.h
	for _, w := range batch {
		if w.DeleteTree != "" {
			for p := range a.marks {
				if workflow.Under(p, w.DeleteTree) {
					delete(a.marks, p)
					delete(h.marks, p)
				}
			}
			continue
		}
		e := w.Put
		if e == nil || e.Kind != workflow.KindStep {
			continue
		}
		m, ok := a.marks[e.Path]
		if !ok || e.Attempts < m.attempt {
			continue
		}
		delete(a.marks, e.Path)
		delete(h.marks, e.Path)
		if m.own {
			a.marking = false
		}
	}
}

// dropMarksLocked deletes every marker: the workflow ended.
func (a *activation[S]) dropMarksLocked() {
	clear(a.h.marks)
	clear(a.marks)
}

// dropOwnMarksLocked deletes the markers the activation's run wrote that
// no record superseded: their bodies were cut off by an eviction, the
// host's graceful stop, and are not counted.
func (a *activation[S]) dropOwnMarksLocked() {
	for p, m := range a.marks {
		if m.own {
			delete(a.marks, p)
			delete(a.h.marks, p)
		}
	}
}

// activationKey is the context key under which Run puts its activation, so
// that Crash, called from a step body with the body's context, finds the
// activation the body belongs to.
type activationKey struct{}

// wakeIdleLocked is Drive's in-place wake at at of the run it drives
// (h.current), which waits from now on: a wait a node unloads the
// workflow for, and the wake starts a new run, which marks its first step
// body (runtime startWorkflow). The wait is simulated in place, so the run
// only starts marking again. A wake a node keeps the run in memory for
// changes nothing: the run marked its first body.
//
// A node's reaper unloads a workflow that waits at some time t at which
// the actor has had no turn for IdleTimeout (t - lastTurn > IdleTimeout;
// the load and every commit are turns) and the wake is still more than
// IdleTimeout away (at - t > IdleTimeout), and none of the actor's
// SendWait senders waits for a completion (runtime idleWorkflow). A t in
// [now, at] meets both iff at - now > IdleTimeout and at - lastTurn >
// 2*IdleTimeout: the idleness counts from the last turn, not from the
// wait's start, so a join's second sleep can be unloaded for although
// neither of its waits is long.
func (h *Host[S]) wakeIdleLocked(at time.Time) {
	a := h.current
	if a == nil || a.dead || a.ended || a.marks == nil || h.IdleTimeout <= 0 {
		return // a.marks nil: markers off (loadMarksLocked)
	}
	if len(h.waiters) > 0 {
		return // a SendWait's sender waits: a node keeps the run
	}
	if at.Sub(h.Clock.Now()) <= h.IdleTimeout || at.Sub(h.lastTurn) <= 2*h.IdleTimeout {
		return
	}
	a.marking = true
	a.markedN = 0
}

// Crash crashes the node while the run goes on: call it with a context of
// a running activation, such as a step body's (StepCtx.Context,
// DoCtx.Context), the workflow's own (Ctx.Context, between steps) or one
// derived from them, such as the ctx a fake client's Call gets from a
// step's body. The activation dies as at an injected crash (CrashAt):
// what it held in memory is lost, the body's attempt records nothing, and
// the run stops with ErrCrash (Drive starts a new activation at once).
// Crash returns ErrCrash at once, and the body's context is then done:
// the body should return (`return h.Crash(s.Context())`), as whatever it
// returns is not recorded. A second Crash of the same activation does
// nothing more and returns ErrCrash too.
//
// As on a node whose process dies in a step body (kill -9, OOM, os.Exit),
// the attempt counts if its run marked it (workflow.AttemptMarker; the
// first body a run starts, and the Do bodies beside it, also after a wait
// long enough for a node to unload the workflow, IdleTimeout): the next
// run records it as failed (workflow.AbandonedAttemptMessage; exhausted
// if it was the step's last) and runs attempt n+1. A step that crashes
// its node each time so ends exhausted after 1+MaxRetries crashes,
// counted from its second crash on if it was not the first body of its
// run. Which bodies of a join are marked depends on timing, as on a node:
// only those that start before a sibling's record commits. A test that
// counts on it orders the branches (one waits for the other's start).
//
// Crash is keyed to the activation, not to the body whose context it
// is given: the node dies whenever it is called. A FakeClient function
// (which goes on after its caller, the body, left: its ctx ended, or the
// step timed out) that calls Crash after the body returned crashes
// whatever the run does then, a later step's body or the commit it waits
// for, not the body that made the call.
//
// It panics if ctx is not of an activation of this host, or if that
// activation's outcome is decided (its run completed, failed or was
// evicted) or its Run has returned: a context kept past its run, with
// nothing left to crash. A FakeClient function's panic is answered as a
// node answers an action's (rivet.ErrInternal, to a caller still there)
// and recorded in FakeCall.Panic, so a late Crash there shows in the
// test's FakeClient.Calls after FakeClient.Wait.
func (h *Host[S]) Crash(ctx context.Context) error {
	a, ok := ctx.Value(activationKey{}).(*activation[S])
	if !ok || a.h != h {
		panic("workflowtest: Crash must be called with a context of a run of this host (StepCtx.Context, DoCtx.Context, Ctx.Context, or one derived from them)")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.ended {
		panic("workflowtest: Crash called after its activation's run ended (a context kept past its run)")
	}
	if !a.dead {
		a.die()
	}
	return ErrCrash
}
