package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// retryingHost is a Host with only the actors map, each actor's runner
// holding the steps given: what RetryingWorkflows reads.
type retryingActor struct {
	ref   Ref
	steps []PendingStep
}

func retryingHost(t *testing.T, actors []retryingActor) *Host {
	t.Helper()
	h := &Host{actors: map[string]*activation{}}
	for _, ra := range actors {
		ref, steps := ra.ref, ra.steps
		r := &wfRunner{}
		w := &wfHost{r: r}
		for _, s := range steps {
			if s.NextAttemptAt.IsZero() {
				w.StepStarted(s.Path, s.Attempt, s.MaxAttempts, s.StartedAt, s.LastError)
			} else {
				w.StepBackingOff(s.Path, s.Attempt, s.MaxAttempts, s.NextAttemptAt, s.LastError)
			}
		}
		a := &activation{h: h, ref: ref}
		a.wf.runner = r
		h.actors[fmt.Sprint(ref)] = a
	}
	return h
}

func names(ws []RetryingWorkflow) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s/%v", w.Ref.Name, w.Ref.Key))
	}
	return out
}

// The actors retrying a step, filtered by name and error before the cut
// (a thousand retrying actors of one name must not hide another's), by
// name then key, each with only its retrying steps, matching ones if an
// error is asked for.
func TestRetryingWorkflowsFilterSortAndCut(t *testing.T) {
	at := time.Now()
	step := func(path string, attempt int, err string) PendingStep {
		return PendingStep{Path: path, Attempt: attempt, MaxAttempts: 5, StartedAt: at, LastError: err}
	}
	actors := []retryingActor{
		{Ref{Name: "payment", Key: []string{"b"}}, []PendingStep{step("charge", 3, "connection refused")}},
		{Ref{Name: "payment", Key: []string{"a"}}, []PendingStep{step("first", 1, ""), step("charge", 2, "timeout"), step("refund", 4, "connection refused")}},
		{Ref{Name: "invoice", Key: []string{"z"}}, []PendingStep{step("send", 2, "connection refused")}},
		{Ref{Name: "invoice", Key: []string{"y"}}, []PendingStep{step("send", 1, "")}}, // not retrying
		{Ref{Name: "mailer", Key: []string{"m"}}, []PendingStep{{Path: "wait", Attempt: 2, MaxAttempts: 5, NextAttemptAt: at.Add(time.Minute), LastError: "busy"}}},
		{Ref{Name: "idle", Key: []string{"i"}}, nil},
	}
	h := retryingHost(t, actors)

	all := h.RetryingWorkflows(RetryingQuery{Limit: 100})
	if got, want := names(all), []string{"invoice/[z]", "mailer/[m]", "payment/[a]", "payment/[b]"}; !slices.Equal(got, want) {
		t.Fatalf("all: %v, want %v", got, want)
	}
	if s := all[2].Steps; len(s) != 2 || s[0].Path != "charge" || s[1].Path != "refund" {
		t.Errorf("payment/a's steps: %+v, want charge then refund (the first attempt left out)", s)
	}
	if s := all[1].Steps; len(s) != 1 || s[0].NextAttemptAt.IsZero() {
		t.Errorf("mailer's step in backoff: %+v", s)
	}

	if got, want := names(h.RetryingWorkflows(RetryingQuery{Limit: 2})), []string{"invoice/[z]", "mailer/[m]"}; !slices.Equal(got, want) {
		t.Errorf("limit 2: %v, want %v (the first by name and key)", got, want)
	}
	// The name applies before the cut: a limit of one still finds payment.
	if got, want := names(h.RetryingWorkflows(RetryingQuery{Limit: 1, Name: "payment"})), []string{"payment/[a]"}; !slices.Equal(got, want) {
		t.Errorf("payment, limit 1: %v, want %v", got, want)
	}
	byErr := h.RetryingWorkflows(RetryingQuery{Limit: 1000, ErrorContains: "refused"})
	if got, want := names(byErr), []string{"invoice/[z]", "payment/[a]", "payment/[b]"}; !slices.Equal(got, want) {
		t.Errorf("error refused: %v, want %v", got, want)
	}
	for _, w := range byErr {
		for _, s := range w.Steps {
			if s.LastError != "connection refused" {
				t.Errorf("%v: step %s (%q) does not match the error asked for", w.Ref, s.Path, s.LastError)
			}
		}
	}
	if got := h.RetryingWorkflows(RetryingQuery{Limit: 1, Name: "payment", ErrorContains: "nothing like it"}); len(got) != 0 {
		t.Errorf("an error no step has: %v", names(got))
	}
	if got := h.RetryingWorkflows(RetryingQuery{}); got != nil {
		t.Errorf("limit 0: %v", names(got))
	}
}

// A host of many actors none of which retries: nothing is copied (the
// steps are looked at under the runner's lock, not cloned and sorted).
func TestRetryingWorkflowsCopiesNothingWhenNoneRetries(t *testing.T) {
	var actors []retryingActor
	for i := range 50 {
		actors = append(actors, retryingActor{Ref{Name: "w", Key: []string{fmt.Sprint(i)}}, []PendingStep{{Path: "a", Attempt: 1}, {Path: "b", Attempt: 1}}})
	}
	h := retryingHost(t, actors)
	var r *wfRunner
	for _, a := range h.actors {
		r = a.wf.runner
		break
	}
	if n := testing.AllocsPerRun(100, func() { r.retryingSteps("", 5) }); n != 0 {
		t.Errorf("a run retrying nothing: %.1f allocations, want 0", n)
	}
}

// A join of thousands of steps retrying against a service that is down:
// MaxSteps keeps the first started, in order, and counts the rest, without
// copying them all first.
func TestRetryingWorkflowsKeepsTheFirstStepsOfAWideJoin(t *testing.T) {
	at := time.Now()
	var steps []PendingStep
	for i := range 2000 {
		steps = append(steps, PendingStep{Path: fmt.Sprintf("fan/b%04d/call", i), Attempt: 2, MaxAttempts: 5, StartedAt: at, LastError: "refused"})
	}
	// Swap-removes on a step's end reorder the runner's list: start order
	// is its seq, not its place.
	h := retryingHost(t, []retryingActor{{Ref{Name: "fan", Key: []string{"k"}}, steps}})
	r := h.actors[fmt.Sprint(Ref{Name: "fan", Key: []string{"k"}})].wf.runner
	r.stepsMu.Lock()
	for i := range r.steps {
		j := (i * 7919) % len(r.steps)
		r.steps[i], r.steps[j] = r.steps[j], r.steps[i]
	}
	r.stepsMu.Unlock()

	got := h.RetryingWorkflows(RetryingQuery{Limit: 10, MaxSteps: 5})
	if len(got) != 1 {
		t.Fatalf("%d workflows, want 1", len(got))
	}
	var paths []string
	for _, s := range got[0].Steps {
		paths = append(paths, s.Path)
	}
	if want := []string{"fan/b0000/call", "fan/b0001/call", "fan/b0002/call", "fan/b0003/call", "fan/b0004/call"}; !slices.Equal(paths, want) {
		t.Errorf("steps %v, want the first five started %v", paths, want)
	}
	if got[0].StepsOmitted != 1995 {
		t.Errorf("StepsOmitted %d, want 1995", got[0].StepsOmitted)
	}
	if n := testing.AllocsPerRun(20, func() { r.retryingSteps("", 5) }); n > 3 {
		t.Errorf("%.1f allocations for 5 of 2,000 steps, want at most 3 (no copy of them all)", n)
	}
	if all := h.RetryingWorkflows(RetryingQuery{Limit: 10}); len(all[0].Steps) != 2000 || all[0].StepsOmitted != 0 {
		t.Errorf("no MaxSteps: %d steps, %d omitted, want all 2000", len(all[0].Steps), all[0].StepsOmitted)
	}
}
