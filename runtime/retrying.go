package runtime

import (
	"cmp"
	"slices"
	"strings"
)

// RetryingWorkflow is an actor in memory whose workflow retries a step
// (Host.RetryingWorkflows).
type RetryingWorkflow struct {
	Ref       Ref
	Partition uint32
	// Steps are its retrying steps: pending steps at their second attempt
	// or later, running or waiting out their backoff, in the order they
	// started.
	Steps []PendingStep
	// StepsOmitted counts its retrying steps left out of Steps, where an
	// answer bounds them (the AdminService's Stats does).
	StepsOmitted int
}

// RetryingQuery says which retrying workflows Host.RetryingWorkflows
// returns. The filters apply before Limit's cut, so that a thousand
// retrying actors of one name do not hide another's.
type RetryingQuery struct {
	// Limit is the most returned; 0 or less, none.
	Limit int
	// Name keeps only the actors of that name; "" keeps all.
	Name string
	// ErrorContains keeps only the steps whose last error contains it, and
	// the actors with such a step; "" keeps all.
	ErrorContains string
	// MaxSteps is the most steps kept per workflow, the first started
	// (the others counted in StepsOmitted); 0 or less, all. A join of
	// thousands of steps against a service that is down retries them
	// all: an answer that bounds them must not copy them first.
	MaxSteps int
}

// RetryingWorkflows returns up to q.Limit of the actors in memory whose
// workflow retries a step now: one of its pending steps (Inspect's) failed
// at least once in its current run of attempts. By name, then key. Only
// the actors in memory are known: one whose backoff outlasts its idle
// timeout leaves memory, and its retry is then a wakeup like a sleep's,
// which this does not list.
func (h *Host) RetryingWorkflows(q RetryingQuery) []RetryingWorkflow {
	if q.Limit <= 0 {
		return nil
	}
	h.mu.Lock()
	all := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		if q.Name == "" || a.ref.Name == q.Name {
			all = append(all, a)
		}
	}
	h.mu.Unlock()
	var out []RetryingWorkflow
	for _, a := range all {
		r := a.runner()
		if r == nil {
			continue
		}
		if steps, omitted := r.retryingSteps(q.ErrorContains, q.MaxSteps); len(steps) > 0 {
			out = append(out, RetryingWorkflow{Ref: a.ref, Partition: a.part, Steps: steps, StepsOmitted: omitted})
		}
	}
	slices.SortFunc(out, func(x, y RetryingWorkflow) int {
		return cmp.Or(strings.Compare(x.Ref.Name, y.Ref.Name), slices.Compare(x.Ref.Key, y.Ref.Key))
	})
	return out[:min(q.Limit, len(out))]
}

// retryingSteps returns the run's steps in flight at their second attempt
// or later whose last error contains errorContains, the first limit of them
// (all if limit <= 0) in the order they started, and how many more there
// are. Most runs retry nothing: they are looked through under the lock,
// and only a run that retries is copied, at most limit of its steps.
func (r *wfRunner) retryingSteps(errorContains string, limit int) (_ []PendingStep, omitted int) {
	keep := func(e pendingEntry) bool {
		return e.ps.Attempt >= 2 && strings.Contains(e.ps.LastError, errorContains)
	}
	bySeq := func(a, b pendingEntry) int { return cmp.Compare(a.seq, b.seq) }
	r.stepsMu.Lock()
	if !slices.ContainsFunc(r.steps, keep) {
		r.stepsMu.Unlock()
		return nil, 0
	}
	var es []pendingEntry
	if limit > 0 {
		es = make([]pendingEntry, 0, min(limit, len(r.steps)))
	}
	for _, e := range r.steps {
		if !keep(e) {
			continue
		}
		switch {
		case limit <= 0 || len(es) < limit:
			es = append(es, e)
			if len(es) == limit {
				slices.SortFunc(es, bySeq)
			}
		case e.seq < es[len(es)-1].seq:
			// Keeps the limit first started: es is sorted once full.
			omitted++
			i, _ := slices.BinarySearchFunc(es, e, bySeq)
			copy(es[i+1:], es[i:len(es)-1])
			es[i] = e
		default:
			omitted++
		}
	}
	r.stepsMu.Unlock()
	slices.SortFunc(es, bySeq)
	out := make([]PendingStep, len(es))
	for i, e := range es {
		out[i] = e.ps
	}
	return out, omitted
}
