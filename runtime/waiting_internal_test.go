package runtime

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// An actor in memory is listed as its blocked runner says; in the moment
// after a yield wrote its record and before the runner is cleared (the
// activation has the yield's time only), the record stands, reason and
// queues: not "queues not recorded" for a waiter, nor "run again" for a
// sleeper. A running or ended workflow is not listed.
func TestWaitingInMemoryOverridesRecordOnlyFromRunner(t *testing.T) {
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	spec := &rivet.Spec{Run: func(context.Context, workflow.Host, []workflow.Entry) workflow.Outcome { return workflow.Outcome{} }}
	record := func() WaitingWorkflow {
		return WaitingWorkflow{Ref: Ref{Name: "w"}, WakeAt: at, Reason: workflow.WakeReceive, Queues: []string{"go"}}
	}

	// Yielded: status Sleeping, wakeAt set, the runner not yet cleared
	// (and no longer waiting).
	a := &activation{spec: spec}
	a.wf.status.Status = WorkflowSleeping
	a.wf.wakeAt = at.UnixMilli()
	a.wf.runner = &wfRunner{}
	w := record()
	if !inMemoryWait(&w, a) || !w.InMemory || w.Reason != workflow.WakeReceive || !slices.Equal(w.Queues, []string{"go"}) || !w.WakeAt.Equal(at) {
		t.Errorf("between a yield and the runner's clearing: %+v; want the record's receive on [go], in memory", w)
	}

	// Blocked in memory: the runner's wake replaces the record.
	later := at.Add(time.Hour)
	a = &activation{spec: spec}
	a.wf.status.Status = WorkflowRunning
	a.wf.runner = &wfRunner{waiting: true, wake: workflow.Wake{At: later, AtReason: workflow.WakeSleep}}
	w = record()
	if !inMemoryWait(&w, a) || w.Reason != workflow.WakeSleep || len(w.Queues) != 0 || !w.WakeAt.Equal(later) {
		t.Errorf("blocked in memory: %+v; want the runner's sleep", w)
	}

	// Running, not listed.
	a.wf.runner.waiting = false
	if w = record(); inMemoryWait(&w, a) {
		t.Errorf("a running workflow is listed: %+v", w)
	}
}
