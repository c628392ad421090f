package runtime

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/workflow"
)

// wfTypeStats counts one actor type's workflows and step attempts, for
// Stats and the metrics labelled by actor type (WorkflowStatsByType). The
// Host makes one per registered type when it is made (the registry does
// not change after), and each activation keeps its type's (activation.wfs),
// so that counting is an atomic add with no lookup.
type wfTypeStats struct {
	running                                     atomic.Int64
	completed, failed, cancelled                atomic.Uint64
	stepsCompleted, stepsFailed, stepsExhausted atomic.Uint64
}

// WorkflowTypeStats are one actor type's workflow counters on this node:
// those of Stats, for that type alone.
type WorkflowTypeStats struct {
	// Running is the workflow runs of the type in memory now.
	Running uint64
	// Completed, Failed and Cancelled count workflows that ended here.
	Completed, Failed, Cancelled uint64
	// StepsCompleted, StepsFailed and StepsExhausted count committed step
	// attempts by outcome.
	StepsCompleted, StepsFailed, StepsExhausted uint64
}

func (s *wfTypeStats) read() WorkflowTypeStats {
	return WorkflowTypeStats{
		Running:   uint64(max(s.running.Load(), 0)),
		Completed: s.completed.Load(), Failed: s.failed.Load(), Cancelled: s.cancelled.Load(),
		StepsCompleted: s.stepsCompleted.Load(), StepsFailed: s.stepsFailed.Load(), StepsExhausted: s.stepsExhausted.Load(),
	}
}

// WorkflowStatsByType returns the workflow counters of each registered
// actor type that has a workflow (Run), by type name: a few series per
// type, never per key.
func (h *Host) WorkflowStatsByType() map[string]WorkflowTypeStats {
	out := make(map[string]WorkflowTypeStats, len(h.wfTypes))
	for name, s := range h.wfTypes {
		if sp, ok := h.reg.Lookup(name); ok && sp.Run != nil {
			out[name] = s.read()
		}
	}
	return out
}

// newWfTypes makes the counters of each registered type.
func newWfTypes(names []string) map[string]*wfTypeStats {
	m := make(map[string]*wfTypeStats, len(names))
	for _, n := range names {
		m[n] = &wfTypeStats{}
	}
	return m
}

// wfStatsOf is the counters of the actor type name: a type the registry
// does not have (none reaches an activation) counts in a set no metric
// shows, so that no caller needs a nil check.
func (h *Host) wfStatsOf(name string) *wfTypeStats {
	if s := h.wfTypes[name]; s != nil {
		return s
	}
	return &h.wfUnknown
}

// wfTotals sums the counters of every type, for Stats.
func (h *Host) wfTotals() WorkflowTypeStats {
	var t WorkflowTypeStats
	add := func(s WorkflowTypeStats) {
		t.Running += s.Running
		t.Completed += s.Completed
		t.Failed += s.Failed
		t.Cancelled += s.Cancelled
		t.StepsCompleted += s.StepsCompleted
		t.StepsFailed += s.StepsFailed
		t.StepsExhausted += s.StepsExhausted
	}
	for _, s := range h.wfTypes {
		add(s.read())
	}
	add(h.wfUnknown.read())
	return t
}

// stepFailuresEvery is how often, at most, a node logs the failed
// attempts of one step (of one actor) that it retries: the first failure
// is logged at once, then at most one line a minute, which says how many
// failures it did not log. A step retrying for ever behind a dependency's
// outage (a backoff of seconds) would otherwise log a line every few
// seconds per actor. A failure for good is always logged.
var stepFailuresEvery = time.Minute

// stepFailLog rations the warnings of failed step attempts, by actor and
// step path. Taken only when an attempt failed: the path of a step that
// succeeds does not touch it.
type stepFailLog struct {
	mu    sync.Mutex
	marks map[string]stepFailMark
	// swept is when marks was last pruned of the marks older than
	// stepFailuresEvery (which no longer hold a line back).
	swept time.Time
}

type stepFailMark struct {
	at    time.Time // the last line logged for the step
	quiet int       // failures not logged since
}

// maxStepFailMarks is the size past which marks is pruned (at most once
// per stepFailuresEvery): a mark outlives its step, which its success
// does not clear (that would cost every step a lookup).
const maxStepFailMarks = 1024

// logged decides whether the failure of the step at id (actor and path)
// is logged now, and returns the failures not logged since the last line.
func (l *stepFailLog) logged(id string, now time.Time, forGood bool) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.marks == nil {
		l.marks = map[string]stepFailMark{}
	}
	m, ok := l.marks[id]
	if !forGood && ok && now.Sub(m.at) < stepFailuresEvery {
		m.quiet++
		l.marks[id] = m
		return false, 0
	}
	if forGood {
		delete(l.marks, id)
	} else {
		l.marks[id] = stepFailMark{at: now}
	}
	if len(l.marks) > maxStepFailMarks && now.Sub(l.swept) >= stepFailuresEvery {
		l.swept = now
		for k, v := range l.marks {
			if now.Sub(v.at) >= stepFailuresEvery {
				delete(l.marks, k)
			}
		}
	}
	return true, m.quiet
}

// stepsCommitted counts the step attempts of writes, now committed (c is
// countSteps(writes)), and logs their failures: a WARN naming the actor,
// its key, the step, the attempt and the error, rationed per step
// (stepFailuresEvery).
func (a *activation) stepsCommitted(c stepCounts, writes []workflow.HistoryWrite) {
	s := a.wfs
	if c.completed > 0 {
		s.stepsCompleted.Add(uint64(c.completed))
	}
	if c.failed == 0 && c.exhausted == 0 {
		return
	}
	if c.failed > 0 {
		s.stepsFailed.Add(uint64(c.failed))
	}
	if c.exhausted > 0 {
		s.stepsExhausted.Add(uint64(c.exhausted))
	}
	now := time.Now()
	for _, w := range writes {
		e := w.Put
		if !isStepAttempt(e) || e.Status != workflow.StatusFailed && e.Status != workflow.StatusExhausted {
			continue
		}
		forGood := e.Status == workflow.StatusExhausted
		ok, quiet := a.h.stepFails.logged(a.id+"\x00"+e.Path, now, forGood)
		if !ok {
			continue
		}
		msg := "workflow step attempt failed: it will be retried after its backoff"
		fields := []zap.Field{actorField(a), zap.String("step", e.Path), zap.Int("attempt", e.Attempts)}
		if forGood {
			msg = "workflow step failed for good"
			fields = append(fields, zap.String("failure", string(e.Failure)))
		}
		if e.Error != nil {
			fields = append(fields, zap.String("error", e.Error.Message))
			if e.Error.Code != "" {
				fields = append(fields, zap.String("error_code", e.Error.Code))
			}
		}
		if quiet > 0 {
			fields = append(fields, zap.Int("failures_not_logged", quiet))
		}
		a.h.log.Warn(msg, fields...)
	}
}
