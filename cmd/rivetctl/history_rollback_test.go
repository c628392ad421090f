package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// history of a saga that rolled back says, in the status column, which
// compensations ran, which failed (its error in the last column) and
// which did not run, and the attempts of a handler that took more than
// one; -o json carries all of it.
func TestHistoryShowsTheRollback(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{
			WorkflowStatus: "failed",
			WorkflowError:  `rollback of step "hotel" failed: hotel service down`,
			Entries: []runtime.HistoryEntry{
				{Path: "cp", Kind: "rollback_checkpoint", Status: "completed"},
				{Path: "flight", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"F1"`), HasRollback: true},
				{Path: "hotel", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"H1"`), HasRollback: true, RollbackError: "hotel service down", RollbackErrorCode: "hotel.down", RollbackAttempts: 4},
				{Path: "car", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"C1"`), HasRollback: true, RollbackDone: true, RollbackAttempts: 1},
				{Path: "pay", Kind: "step", Status: "exhausted", Attempts: 1, Error: "payment refused"},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	rivetctl(t, addr, "history", "saga", "s").want(t, 0, `workflow  failed
error     rollback of step "hotel" failed: hotel service down
PATH    KIND                 STATUS                                   ATTEMPTS  OUTPUT / ERROR
cp      rollback_checkpoint  completed                                0         -
flight  step                 completed, not rolled back               1         "F1"
hotel   step                 completed, rollback failed (4 attempts)  1         rollback error (hotel.down): hotel service down
car     step                 completed, rolled back                   1         "C1"
pay     step                 exhausted                                1         error: payment refused
`)

	r := rivetctl(t, addr, "-o", "json", "history", "saga", "s")
	var h client.History
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil || len(h.Entries) != 5 {
		t.Fatalf("history -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	want := []client.HistoryEntry{
		{Path: "flight", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"F1"`), HasRollback: true},
		{Path: "hotel", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"H1"`), HasRollback: true, RollbackError: "hotel service down", RollbackErrorCode: "hotel.down", RollbackAttempts: 4},
		{Path: "car", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"C1"`), HasRollback: true, RollbackDone: true, RollbackAttempts: 1},
	}
	for i, w := range want {
		g := h.Entries[i+1]
		if g.Path != w.Path || string(g.Output) != string(w.Output) || g.HasRollback != w.HasRollback || g.RollbackDone != w.RollbackDone ||
			g.RollbackError != w.RollbackError || g.RollbackErrorCode != w.RollbackErrorCode || g.RollbackAttempts != w.RollbackAttempts {
			t.Errorf("entry %d = %+v, want %+v", i+1, g, w)
		}
	}
	if !strings.Contains(r.stdout, `"rollback_done":true`) || !strings.Contains(r.stdout, `"rollback_error":"hotel service down"`) || !strings.Contains(r.stdout, `"rollback_attempts":4`) {
		t.Errorf("history -o json does not name the rollback fields:\n%s", r.stdout)
	}

	// While the workflow runs (after a retry), a step's handler that has
	// not run is not news: the status is the step's alone. One that failed
	// and waits to run again (in a rollback in progress) says so, and why:
	// its last attempt's error.
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{WorkflowStatus: "sleeping", Entries: []runtime.HistoryEntry{
			{Path: "flight", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"F1"`), HasRollback: true},
			{Path: "hotel", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"H1"`), HasRollback: true, RollbackAttempts: 2,
				RollbackRetryError: "hotel service down", RollbackRetryErrorCode: "hotel.down"},
		}}, nil
	}
	rivetctl(t, addr, "history", "saga", "s").want(t, 0, `workflow  sleeping
PATH    KIND  STATUS                                     ATTEMPTS  OUTPUT / ERROR
flight  step  completed                                  1         "F1"
hotel   step  completed, rollback retrying (2 attempts)  1         last rollback error (hotel.down): hotel service down
`)
	r = rivetctl(t, addr, "-o", "json", "history", "saga", "s")
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil || len(h.Entries) != 2 ||
		h.Entries[1].RollbackRetryError != "hotel service down" || h.Entries[1].RollbackRetryErrorCode != "hotel.down" {
		t.Fatalf("history -o json of a rollback retrying: exit %d, %v, want the last attempt's error:\n%s", r.code, err, r.stdout)
	}
	if !strings.Contains(r.stdout, `"rollback_retry_error":"hotel service down"`) || !strings.Contains(r.stdout, `"rollback_retry_error_code":"hotel.down"`) {
		t.Errorf("history -o json does not name the retry error's fields:\n%s", r.stdout)
	}
}

// A workflow cancelled while a rollback handler waited to be retried runs
// no more attempts: its history says the rollback stopped there, not that
// it is retrying, with the attempts it took and the last one's error.
func TestHistoryOfARollbackCancelledDuringItsBackoff(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{WorkflowStatus: "cancelled", WorkflowError: "cancelled: hotel is down for the day", Entries: []runtime.HistoryEntry{
			{Path: "flight", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"F1"`), HasRollback: true},
			{Path: "hotel", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"H1"`), HasRollback: true, RollbackAttempts: 1,
				RollbackRetryError: "hotel service down"},
			{Path: "car", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`"C1"`), HasRollback: true, RollbackDone: true, RollbackAttempts: 3},
			{Path: "pay", Kind: "step", Status: "exhausted", Attempts: 1, Error: "payment refused"},
		}}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "history", "saga", "s").want(t, 0, `workflow  cancelled
error     cancelled: hotel is down for the day
PATH    KIND  STATUS                                                   ATTEMPTS  OUTPUT / ERROR
flight  step  completed, not rolled back                               1         "F1"
hotel   step  completed, rollback stopped (cancelled) after 1 attempt  1         last rollback error: hotel service down
car     step  completed, rolled back (3 attempts)                      1         "C1"
pay     step  exhausted                                                1         error: payment refused
`)
}

// A workflow cancelled after a retry went on past the compensations of an
// earlier rollback (retry --from the failed step): the cancel stopped no
// rollback, so its other compensations are not "not rolled back", and those
// of the earlier rollback still show it (and, as JSON, that they are
// settled).
func TestHistoryOfACancelAfterARetryPastCompensations(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{WorkflowStatus: "cancelled", WorkflowError: "cancelled: stop", Entries: []runtime.HistoryEntry{
			{Path: "flight", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`1`), HasRollback: true, RollbackDone: true, RollbackSettled: true, RollbackAttempts: 1},
			{Path: "pay", Kind: "step", Status: "completed", Attempts: 2},
			{Path: "car", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`2`), HasRollback: true},
		}}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "history", "saga", "s").want(t, 0, `workflow  cancelled
error     cancelled: stop
PATH    KIND  STATUS                  ATTEMPTS  OUTPUT / ERROR
flight  step  completed, rolled back  1         1
pay     step  completed               2         -
car     step  completed               1         2
`)
	if r := rivetctl(t, addr, "history", "saga", "s", "-o", "json"); !strings.Contains(r.stdout, `"rollback_settled":true`) {
		t.Errorf("history -o json does not say the compensation is settled:\n%s", r.stdout)
	}
}

// A workflow error of several lines (the workflow's own, then its failed
// rollback's, as errors.Join puts them) is one line in inspect and history,
// its lines joined by "; " as actors --failed joins them, not a literal \n.
func TestAFailedRollbacksErrorReadsOnOneLine(t *testing.T) {
	const joined = "workflow: step \"charge\" failed: the bank declined the card\nworkflow: rollback of step \"reserve\" failed: stock service down"
	const want = `workflow: step "charge" failed: the bank declined the card; workflow: rollback of step "reserve" failed: stock service down`
	f := servertest.NewFake()
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{Info: runtime.ActorInfo{Ref: ref}, WorkflowStatus: "failed", WorkflowError: joined}, nil
	}
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{WorkflowStatus: "failed", WorkflowError: joined}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	r := rivetctl(t, addr, "inspect", "saga", "s")
	if r.code != 0 || !strings.Contains(r.stdout, "workflow error  "+want+"\n") || strings.Contains(r.stdout, `\n`) {
		t.Errorf("inspect: exit %d, want the error on one line, joined by \"; \":\n%s", r.code, r.stdout)
	}
	r = rivetctl(t, addr, "history", "saga", "s")
	if r.code != 0 || !strings.Contains(r.stdout, "error     "+want+"\n") || strings.Contains(r.stdout, `\n`) {
		t.Errorf("history: exit %d, want the error on one line, joined by \"; \":\n%s", r.code, r.stdout)
	}
	// -o json keeps the error as it is.
	if r := rivetctl(t, addr, "-o", "json", "history", "saga", "s"); !strings.Contains(r.stdout, `declined the card\nworkflow: rollback`) {
		t.Errorf("history -o json changed the error:\n%s", r.stdout)
	}
}
