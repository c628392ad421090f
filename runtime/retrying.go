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
	// or later, running or waiting out their backoff.
	Steps []PendingStep
}

// RetryingWorkflows returns up to limit of the actors in memory whose
// workflow retries a step now: one of its pending steps (Inspect's) failed
// at least once in its current run of attempts. By name, then key. Only
// the actors in memory are known: one whose backoff outlasts its idle
// timeout leaves memory, and its retry is then a wakeup like a sleep's,
// which this does not list.
func (h *Host) RetryingWorkflows(limit int) []RetryingWorkflow {
	if limit <= 0 {
		return nil
	}
	h.mu.Lock()
	all := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		all = append(all, a)
	}
	h.mu.Unlock()
	var out []RetryingWorkflow
	for _, a := range all {
		steps, _ := a.pendingSteps()
		steps = slices.DeleteFunc(steps, func(s PendingStep) bool { return s.Attempt < 2 })
		if len(steps) > 0 {
			out = append(out, RetryingWorkflow{Ref: a.ref, Partition: a.part, Steps: steps})
		}
	}
	slices.SortFunc(out, func(x, y RetryingWorkflow) int {
		return cmp.Or(strings.Compare(x.Ref.Name, y.Ref.Name), slices.Compare(x.Ref.Key, y.Ref.Key))
	})
	return out[:min(limit, len(out))]
}
