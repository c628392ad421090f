package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// MaxCancelReason bounds the reason a CancelWorkflow records: it is kept in
// the workflow's status and repeated to waiting senders.
const MaxCancelReason = 1024

// CancelWorkflow stops an actor's workflow for good, as an operator's
// decision (Temporal's terminate, the original engine's cancel): a
// workflow that loops for ever, or waits on what will never come. The run
// stops where it is: a step in flight has its context cancelled and its
// attempt is not recorded (a success that lands anyway is), as after a
// crash. Its status becomes WorkflowCancelled, with reason in its error,
// durably: no node runs it again, its wakeup is dropped, senders waiting
// for a completion are answered, and new messages stay queued. The state,
// the history and the actions are untouched, and RetryWorkflow resumes
// the run from where it stopped.
//
// Cancelling a cancelled workflow changes nothing (so a client may retry
// the call); a completed or failed one cannot be cancelled
// (rivet.ErrWorkflowFailed, FAILED_PRECONDITION on the wire). It returns
// the status the workflow had: running, sleeping or cancelled.
func (h *Host) CancelWorkflow(ctx context.Context, ref Ref, reason string) (string, error) {
	if err := h.begin(); err != nil {
		return "", err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return "", err
	}
	if sp.Run == nil {
		return "", rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow", ref.Name)
	}
	if err := checkCancelReason(reason); err != nil {
		return "", err
	}
	// The status is read first: the stopped run may say "sleeping" by
	// the time the turn comes.
	early, earlyRun, earlyPrev := h.stopRunEarly(ref)
	var (
		prev string
		ran  bool
	)
	// An actor not in memory is loaded without its workflow, and this turn
	// comes first (turnFor), as for Destroy: no step runs between the
	// cancel and its load.
	_, _, err = h.turnFor(ctx, TurnAdmin, ref, sp, false, nil, h.newChain(), true, func(a *activation) error {
		ran = true
		now := a.shownWorkflowStatus()
		prev = now
		if a == early && earlyRun != nil && !workflowEnded(now) {
			prev = earlyPrev
		}
		if now == WorkflowCancelled {
			return nil
		}
		if workflowEnded(now) {
			return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "ended", "the workflow of %s has %s: only a running or sleeping workflow can be cancelled", a.describe(), now)
		}
		r := a.runner()
		if err := a.stopWorkflowWithin(ctx); err != nil {
			// Still stopping (a stateless step that does not heed its
			// context): once it has, this memory, left without a run,
			// is dropped and the workflow runs again from storage.
			h.rerunAfter(a, r)
			return err
		}
		if st := a.workflowStatus(); workflowEnded(st.Status) {
			// The run ended on its own before it saw the cancel.
			return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "ended", "the workflow of %s has %s before it could be cancelled", a.describe(), st.Status)
		}
		msg := "cancelled"
		if reason != "" {
			msg += ": " + reason
		}
		cst := workflowStatus{Status: WorkflowCancelled, Error: msg, FailedAt: noEntry}
		b, _ := json.Marshal(cst)
		// After the stopped run's last record (its wakeup) in the
		// actor's order of writes: the delete below wins.
		// With the attempt markers of the stopped run (attempts.go): a
		// retry must not count them against the steps it runs again.
		v, err := a.enqueue(a.dropMarksOps([]storage.Op{
			storage.Put(a.key(storage.WorkflowStatusSuffix), b),
			storage.Delete(storage.WakeupKey(a.part, a.ref.Name, a.enc)),
			storage.Delete(storage.FailedKey(a.ref.Name, a.enc)),
		})...)
		if err == nil {
			err = a.waitCommitted(ctx, v)
		}
		if err != nil {
			// Cancelled in storage or not, as far as is known: this
			// memory (no run) may be behind it. Loaded again once its
			// writes settle, the actor runs its workflow or not, as
			// storage says.
			h.evictAndRerun(a)
			return err
		}
		a.mu.Lock()
		a.wf.status = cst
		a.wf.wakeAt = 0
		a.mu.Unlock()
		h.timers.cancel(a.id)
		a.failWaiters()
		a.wfs.cancelled.Add(1)
		h.log.Info("workflow cancelled", actorField(a), zap.String("reason", reason), zap.String("was", prev))
		return nil
	})
	if err != nil && !ran && earlyRun != nil {
		// The turn never came (the caller's deadline, a step that does
		// not heed its context): the run cancelled above stops as if
		// deactivated, and nothing in this memory would start it again.
		// Once it has ended (evicted before, the actor would load again
		// while that step still runs, and run it twice at once), the
		// actor loads again from storage, and its workflow runs on.
		h.rerunAfter(early, earlyRun)
	}
	return prev, err
}

// stopRunEarly cancels the run of the actor's workflow, if it is in memory
// and running, before an admin turn that stops it (CancelWorkflow,
// Destroy) waits for the actor's turn: a step in flight holds that turn
// until it ends on its own (its timeout can be minutes, or none), and,
// cancelled now, gives it up as soon as its code sees its context done.
// It returns the activation and the run it cancelled (nil if none), and
// the workflow's status as shown before. If the admin turn never comes,
// the caller must rerunAfter(a, r): nothing in memory would start the
// cancelled run again.
func (h *Host) stopRunEarly(ref Ref) (a *activation, r *wfRunner, prev string) {
	enc, _, err := h.place(ref)
	if err != nil {
		return nil, nil, ""
	}
	h.mu.Lock()
	a = h.actors[ref.Name+"/"+enc]
	h.mu.Unlock()
	if a == nil {
		return nil, nil, ""
	}
	select {
	case <-a.ready:
		if a.loadErr != nil {
			return nil, nil, ""
		}
	default:
		return nil, nil, "" // still loading: its fields are the loader's
	}
	prev, r = a.shownWorkflowStatus(), a.runner()
	if r != nil {
		r.cancel()
	}
	return a, r, prev
}

// rerunAfter evicts a, and runs its workflow again from storage, once its
// run r has ended: at once if it has, else as r ends. Evicted while r
// still runs, the actor could load again, and run the step r is in a
// second time, at once with it (a step that does not heed its context).
func (h *Host) rerunAfter(a *activation, r *wfRunner) {
	if r == nil {
		h.evictWhenFree(a)
		return
	}
	r.rerun.Store(true)
	select {
	case <-r.done:
		// Ended, perhaps before it could see the flag: whichever of the
		// run and this takes the flag evicts.
		if r.rerun.Swap(false) {
			h.evictWhenFree(a)
		}
	default:
	}
}

// evictWhenFree evicts a, and runs its workflow again from storage, once no
// turn holds it. Evicted under another caller's turn (a Destroy that is
// about to delete the actor), a new activation could load meanwhile and
// write after that delete.
func (h *Host) evictWhenFree(a *activation) {
	chain := h.newChain()
	if a.gate.tryAcquire(chain) {
		h.evictAndRerun(a)
		a.gate.release(chain)
		return
	}
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return // the node stops: the partition's next owner runs it
	}
	h.workflows.Add(1) // Stop waits for it, as for a run
	h.mu.Unlock()
	go func() {
		defer h.workflows.Done()
		if a.gate.acquire(h.wfCtx, chain) == nil { // ends first at Stop
			h.evictAndRerun(a)
			a.gate.release(chain)
		}
	}()
}

// checkCancelReason says which rule a reason breaks: one message for all
// three gave a short reason with a newline "at most 1024 bytes (it is 3)",
// which sent its user looking for a length problem.
func checkCancelReason(reason string) error {
	if len(reason) > MaxCancelReason {
		return rivet.Errorf(rivet.ErrInvalidArgument, "the reason is %d bytes, the limit is %d", len(reason), MaxCancelReason)
	}
	if !utf8.ValidString(reason) {
		return rivet.Errorf(rivet.ErrInvalidArgument, "the reason is not valid UTF-8")
	}
	if i := strings.IndexFunc(reason, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(reason[i:])
		return rivet.Errorf(rivet.ErrInvalidArgument, "the reason holds a control character (%U at byte %d): it must be one line of text", r, i)
	}
	return nil
}
