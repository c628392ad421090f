package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// Attempt markers (workflow.AttemptMarker): the step attempts a crash of
// the node cut short (kill -9, OOM, os.Exit, a panic in a goroutine a body
// started) leave a trace, so that the step's next run counts them, as
// Temporal counts an activity attempt its start-to-close timeout ends.
//
// A run marks the bodies that start before any marked attempt of its own
// has recorded its end: the first step body after a load (or a retry, or a
// wake that starts the run again), and the Do bodies that start beside it
// (a join's branches; at most maxRunMarks). Each marker is a key of its own, am/<step path>,
// committed (fenced, as any write) before the body starts, and deleted in
// the commit that records the step's entry. Once a marked attempt has
// recorded its end, the run marks nothing more: no write per step in the
// steady state, the cost is one commit per run, before its first body. A
// crash in a later body of the run leaves no marker; that step, run again
// first after the restart, is marked then, so that a step that crashes its
// node each time is counted from its second crash on.
//
// The keys are outside wf/ (storage.AttemptMarkSuffix): a build that does
// not know them reads no history entry of them, and deletes them with the
// actor (its prefix). A load reads them with the history; the engine asks
// for them by path (AbandonedAttempt) when its step has no newer record,
// records the abandoned attempt as failed (its commit deletes the marker),
// and goes on with the next attempt.

// maxRunMarks bounds the markers of one run: a join of thousands of Do
// branches would otherwise commit one each before its bodies start, at
// every load. The bodies past it go unmarked, as a run's later bodies do.
const maxRunMarks = 64

// attemptMark is a marker's value.
type attemptMark struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// markEntry is a marker the activation knows in storage, by its step's
// path (activation.marks): own says a run of this activation wrote it, not
// a load that read it (that one is an attempt abandoned before the load).
type markEntry struct {
	attemptMark
	own bool
}

func attemptMarkKey(prefix, path string) string {
	return prefix + storage.AttemptMarkSuffix + path
}

// readAttemptMarks reads the attempt markers of the actor at prefix, by
// step path.
func (h *Host) readAttemptMarks(ctx context.Context, prefix string) (map[string]markEntry, error) {
	kvs, err := h.store.List(ctx, prefix+storage.AttemptMarkSuffix, storage.ListOptions{})
	if err != nil || len(kvs) == 0 {
		return nil, err
	}
	marks := make(map[string]markEntry, len(kvs))
	for _, kv := range kvs {
		var m attemptMark
		if err := json.Unmarshal(kv.Value, &m); err != nil || m.Attempt < 1 {
			// Unreadable, it cannot be counted: the attempt goes
			// uncounted, as before markers, and the key with the
			// workflow's end.
			h.log.Warn("workflow attempt marker does not decode: ignored (the attempt it marks goes uncounted)", zap.String("key", kv.Key))
			continue
		}
		marks[kv.Key[len(prefix)+len(storage.AttemptMarkSuffix):]] = markEntry{attemptMark: m}
	}
	return marks, nil
}

// setLoadedMarks installs the markers a load read.
func (a *activation) setLoadedMarks(marks map[string]markEntry) {
	a.marksMu.Lock()
	a.marks = marks
	a.marksN.Store(int32(len(marks)))
	a.marksMu.Unlock()
}

// MarkAttempt implements workflow.AttemptMarker: while the run has not
// seen a marked attempt record its end, the body's attempt is marked, and
// the marker is durable before the body starts.
func (w *wfHost) MarkAttempt(path string, attempt int, at time.Time) error {
	a := w.a
	if !a.wf.marking.Load() || a.wf.markedN.Add(1) > maxRunMarks {
		return nil
	}
	b, _ := json.Marshal(attemptMark{Attempt: attempt, At: at})
	a.marksMu.Lock()
	if a.marks == nil {
		a.marks = map[string]markEntry{}
	}
	a.marks[path] = markEntry{attemptMark: attemptMark{Attempt: attempt, At: at}, own: true}
	a.marksN.Store(int32(len(a.marks)))
	a.marksMu.Unlock()
	v, err := a.enqueue(storage.Put(attemptMarkKey(a.prefix, path), b))
	if err != nil {
		return fmt.Errorf("%w: %v", workflow.ErrEvicted, err)
	}
	return w.wait(v)
}

// AbandonedAttempt implements workflow.AttemptMarker: a marker a load read
// (its attempt started on an earlier activation) that no commit has
// deleted yet.
func (w *wfHost) AbandonedAttempt(path string) (int, time.Time, bool) {
	a := w.a
	if a.marksN.Load() == 0 {
		return 0, time.Time{}, false
	}
	a.marksMu.Lock()
	defer a.marksMu.Unlock()
	m, ok := a.marks[path]
	if !ok || m.own {
		return 0, time.Time{}, false
	}
	return m.Attempt, m.At, true
}

var _ workflow.AttemptMarker = (*wfHost)(nil)

// markOps returns ops with the deletes of the markers of the steps whose
// entries ws put (the commit that records a step supersedes its marker)
// and of those under the trees ws deletes. A
// marker of this run's own whose step records its end ends the run's
// marking. Called when the commit's ops are made; nothing to do (one
// atomic load) when the activation holds no marker.
func (a *activation) markOps(ops []storage.Op, ws []workflow.HistoryWrite) []storage.Op {
	if a.marksN.Load() == 0 {
		return ops
	}
	a.marksMu.Lock()
	defer a.marksMu.Unlock()
	for _, w := range ws {
		if w.DeleteTree != "" {
			// A race's loser (its body cut off, never recorded) or a
			// pruned iteration: its markers go with its tree, or a loop
			// that races Do bodies at each wake would leave one more
			// each time, for every load to read until the workflow ends.
			for p := range a.marks {
				if workflow.Under(p, w.DeleteTree) {
					ops = append(ops, storage.Delete(attemptMarkKey(a.prefix, p)))
					delete(a.marks, p)
				}
			}
			continue
		}
		e := w.Put
		if e == nil || e.Kind != workflow.KindStep {
			continue
		}
		m, ok := a.marks[e.Path]
		if !ok || e.Attempts < m.Attempt {
			continue
		}
		ops = append(ops, storage.Delete(attemptMarkKey(a.prefix, e.Path)))
		delete(a.marks, e.Path)
		if m.own {
			a.wf.marking.Store(false)
		}
	}
	a.marksN.Store(int32(len(a.marks)))
	return ops
}

// dropMarksOps returns ops with the delete of every marker: the workflow
// ended (its markers are of race losers, of steps whose code changed), or
// a retry rewrites its history.
func (a *activation) dropMarksOps(ops []storage.Op) []storage.Op {
	a.marksMu.Lock()
	defer a.marksMu.Unlock()
	a.marks = nil
	a.marksN.Store(0)
	return append(ops, storage.DeletePrefix(a.prefix+storage.AttemptMarkSuffix))
}

// ownMarksOps returns ops with the deletes of the markers this
// activation's runs wrote and no record has superseded (their bodies are
// abandoned by a graceful leave), and their paths, to forget once the
// commit has succeeded (forgetMarks). The markers a load read stay: they
// are of attempts that ended with an earlier node.
func (a *activation) ownMarksOps(ops []storage.Op) ([]storage.Op, []string) {
	if a.marksN.Load() == 0 {
		return ops, nil
	}
	a.marksMu.Lock()
	defer a.marksMu.Unlock()
	var paths []string
	for p, m := range a.marks {
		if m.own {
			ops = append(ops, storage.Delete(attemptMarkKey(a.prefix, p)))
			paths = append(paths, p)
		}
	}
	return ops, paths
}

// forgetMarks drops the markers at paths, whose deletes committed.
func (a *activation) forgetMarks(paths []string) {
	if len(paths) == 0 {
		return
	}
	a.marksMu.Lock()
	defer a.marksMu.Unlock()
	for _, p := range paths {
		if m, ok := a.marks[p]; ok && m.own {
			delete(a.marks, p)
		}
	}
	a.marksN.Store(int32(len(a.marks)))
}
