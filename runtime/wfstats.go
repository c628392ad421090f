package runtime

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/textcut"
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
// attempts of one step of an actor type (its name, a loop's iterations
// counted as one) that it retries, and, apart, its failures for good: the
// first is logged at once, then at most one line a minute, which says how
// many failures it did not log. A step retrying for ever behind a
// dependency's outage (a backoff of seconds) would otherwise log a line
// every few seconds per actor, and a polling loop a line per iteration.
var stepFailuresEvery = time.Minute

// stepFailLog rations the warnings of failed step attempts, by actor type
// and step (stepFailKey). Taken only when an attempt failed: the path of a
// step that succeeds does not touch it.
type stepFailLog struct {
	mu    sync.Mutex
	marks map[string]stepFailMark
	// swept is when marks was last pruned of the marks older than
	// stepFailuresEvery (which no longer hold a line back).
	swept time.Time
}

type stepFailMark struct {
	at, atGood time.Time // the last line logged for the step's failures, and for good
	quiet      int       // failures not logged since either
}

// maxStepFailMarks is the size past which marks is pruned (at most once
// per stepFailuresEvery): a mark outlives its step, which its success
// does not clear (that would cost every step a lookup). Past it after a
// prune (many steps of many names failing within a minute), the marks are
// dropped, and the map with them: a few lines more, rather than memory
// that a spike took kept for good.
const maxStepFailMarks = 1024

// stepFailKey is the key of a step's failures in stepFailLog: the actor's
// type and the step's path with a loop's iteration numbers left out
// (charge-loop/~/charge-card), so that a polling loop's failing step
// counts as one, and so do the actors of a type failing at once.
func stepFailKey(actorType, path string) string {
	var b strings.Builder
	b.Grow(len(actorType) + 1 + len(path))
	b.WriteString(actorType)
	b.WriteByte(0)
	for i, seg := range strings.Split(path, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if len(seg) > 1 && seg[0] == '~' && strings.Trim(seg[1:], "0123456789") == "" {
			seg = "~"
		}
		b.WriteString(seg)
	}
	return b.String()
}

// logged decides whether the failure (forGood: for good) of the step of
// key (stepFailKey) is logged now, and returns the failures of it not
// logged since the last line.
func (l *stepFailLog) logged(key string, now time.Time, forGood bool) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.marks == nil {
		l.marks = map[string]stepFailMark{}
	}
	m, ok := l.marks[key]
	last := m.at
	if forGood {
		last = m.atGood
	}
	if ok && !last.IsZero() && now.Sub(last) < stepFailuresEvery {
		m.quiet++
		l.marks[key] = m
		return false, 0
	}
	quiet := m.quiet
	m.quiet = 0
	if forGood {
		m.atGood = now
	} else {
		m.at = now
	}
	l.marks[key] = m
	if len(l.marks) > maxStepFailMarks {
		if now.Sub(l.swept) >= stepFailuresEvery {
			l.swept = now
			for k, v := range l.marks {
				if now.Sub(v.at) >= stepFailuresEvery && now.Sub(v.atGood) >= stepFailuresEvery {
					delete(l.marks, k)
				}
			}
		}
		if len(l.marks) > maxStepFailMarks {
			l.marks = nil
		}
	}
	return true, quiet
}

// maxLoggedError bounds a step's error in its log line: its start and its
// end (a wrapped error's cause) are kept. An error may be up to 16 KiB
// (workflow.MaxErrorBytes), and a line per failing step of many actors.
const maxLoggedError = 1536

// cutLoggedError is msg, cut in its middle to about maxLoggedError bytes.
func cutLoggedError(msg string) string {
	if len(msg) <= maxLoggedError {
		return msg
	}
	head := textcut.Prefix(msg, 1024)
	tail := msg[len(msg)-512:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + " … " + tail
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
		ok, quiet := a.h.stepFails.logged(stepFailKey(a.ref.Name, e.Path), now, forGood)
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
			fields = append(fields, zap.String("error", cutLoggedError(e.Error.Message)))
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
