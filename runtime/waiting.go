package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
)

// WaitQuery says which workflows Host.WaitingWorkflows returns.
type WaitQuery struct {
	// Waiting lists the workflows that wait for a message with no time
	// that would wake them; false, those that wake at a time (sleeping).
	Waiting bool
	// Name keeps only the actors of that name; "" keeps all.
	Name string
	// DueBefore, if set, keeps only the sleeping workflows that wake
	// before it.
	DueBefore time.Time
	// Limit is the most returned (the earliest to wake, or the first by
	// name and key of waiting ones); the others are counted.
	Limit int
}

// WaitingWorkflow is an actor of this node's partitions whose workflow
// sleeps or waits for a message.
type WaitingWorkflow struct {
	Ref       Ref
	Partition uint32
	// WakeAt is when the workflow runs again by itself; zero for one that
	// waits for a message only.
	WakeAt time.Time
	// Reason is what WakeAt is the deadline of (workflow.WakeSleep,
	// WakeReceive, WakeRetry); empty if the record says to run the
	// workflow at once (created, stopped in the middle of a run, a
	// message came) or an older build wrote it without saying.
	Reason string
	// Queues are the queues a message on which wakes it, AnyQueue that
	// any message would (neither: not recorded, by an older build).
	Queues   []string
	AnyQueue bool
	// InMemory says the actor is in memory on its owner, which told what
	// its workflow waits for; otherwise its wakeup record did.
	InMemory bool
}

// WaitList is what Host.WaitingWorkflows returns.
type WaitList struct {
	Workflows []WaitingWorkflow
	// Omitted counts the workflows that matched after the last listed.
	Omitted int
	// Partitions are the partitions whose wakeup records were read: the
	// workflows of the others are another node's to list.
	Partitions []uint32
}

// waitingReaders is how many of a listing's partition reads are in flight
// at once.
const waitingReaders = 8

// WaitingWorkflows lists the actors of the partitions this node serves
// whose workflow sleeps (wakes at a time: a sleep, a receive's timeout, a
// step's retry) or, with q.Waiting, waits for a message only, from the
// partitions' wakeup records, which every actor has from its creation
// until its workflow ends. An actor in memory is as its running workflow
// says: its record is written when its workflow stops (nothing is written
// when it starts), and while it runs still holds its creation's time, the
// time a message came for it, or its last yield's deadline, which would
// read as a sleep long overdue or one that is over. A workflow running
// now is not listed. Sleeping ones come earliest first, waiting ones by
// name and key.
func (h *Host) WaitingWorkflows(ctx context.Context, q WaitQuery) (WaitList, error) {
	if err := h.begin(); err != nil {
		return WaitList{}, err
	}
	defer h.end()
	if q.Name != "" {
		if err := rivet.ValidateName("actor name", q.Name); err != nil {
			return WaitList{}, err
		}
	}
	limit := max(q.Limit, 1)
	order := func(x, y WaitingWorkflow) int {
		return cmp.Or(x.WakeAt.Compare(y.WakeAt), strings.Compare(x.Ref.Name, y.Ref.Name), slices.Compare(x.Ref.Key, y.Ref.Key))
	}
	var out []WaitingWorkflow
	matched := 0
	add := func(w WaitingWorkflow) {
		matched++
		out = append(out, w)
		// Bounded as it goes: a node may hold a million sleeping
		// workflows, and the answer wants the first limit of them.
		if len(out) >= 2*limit+1024 {
			slices.SortFunc(out, order)
			out = out[:limit]
		}
	}
	// Only the partitions served now: a claim past its lease's local
	// deadline may be another node's already, which lists it too.
	parts := slices.DeleteFunc(h.own.Partitions(), func(p uint32) bool { return !h.own.Owns(p) })
	want := make(map[uint32]bool, len(parts))
	for _, p := range parts {
		want[p] = true
	}
	fn := func(kv storage.KV) {
		// wakeups/<p:5>/<name>/<enc>
		rest := strings.TrimPrefix(kv.Key, storage.WakeupsPrefix)
		if len(rest) < 7 || rest[5] != '/' {
			return
		}
		p, err := strconv.ParseUint(rest[:5], 10, 32)
		if err != nil || !want[uint32(p)] {
			return
		}
		name, enc, ok := cut(rest[6:], '/')
		if !ok || (q.Name != "" && name != q.Name) {
			return
		}
		key, err := storage.DecodeKey(enc)
		if err != nil {
			return
		}
		var rec wakeupRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			return
		}
		w := WaitingWorkflow{Ref: Ref{Name: name, Key: key}, Partition: uint32(p), Reason: rec.Why, Queues: rec.Queues, AnyQueue: rec.Any}
		if rec.At > 0 {
			w.WakeAt = time.UnixMilli(rec.At)
		}
		h.mu.Lock()
		a := h.actors[name+"/"+enc]
		h.mu.Unlock()
		if a != nil && !inMemoryWait(&w, a) {
			return
		}
		if q.Waiting != w.WakeAt.IsZero() {
			return
		}
		if !q.DueBefore.IsZero() && !w.WakeAt.Before(q.DueBefore) {
			return
		}
		add(w)
	}
	// A read per partition served (only the name's keys of each, given
	// one), not one pass over the whole cluster's prefix as a start's
	// eachInParts makes: that read every node's records, a node of three
	// three times its own, and a listing is asked of every node at once.
	// A few at a time: a read is a round trip to etcd, and a node serves
	// hundreds of partitions. Every record of the partitions is read,
	// whatever the limit: the sleeping ones are ordered by time, which the
	// keys are not, and the workflows left out are counted.
	var mu sync.Mutex
	locked := func(kv storage.KV) {
		mu.Lock()
		defer mu.Unlock()
		fn(kv)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, errs := make(chan uint32), make(chan error, waitingReaders)
	var wg sync.WaitGroup
	for range min(waitingReaders, len(parts)) {
		wg.Go(func() {
			for p := range next {
				prefix := storage.WakeupPartitionPrefix(p)
				if q.Name != "" {
					prefix += q.Name + "/"
				}
				if err := h.eachUnder(rctx, prefix, false, locked); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for _, p := range parts {
		select {
		case next <- p:
		case <-rctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	var err error
	select {
	case err = <-errs:
	default:
		err = ctx.Err()
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return WaitList{}, rivet.Errorf(rivet.ErrTimeout, "list wakeups: %v", ctx.Err())
	case err != nil:
		return WaitList{}, rivet.Errorf(rivet.ErrUnavailable, "list wakeups: %v", err)
	}
	slices.SortFunc(out, order)
	out = out[:min(limit, len(out))]
	return WaitList{Workflows: out, Omitted: matched - len(out), Partitions: parts}, nil
}

// inMemoryWait sets w, read from a's wakeup record, as a (in memory) says:
// false if its workflow runs now or has ended. A runner blocked in memory
// reported what it waits for, which replaces the record (written when the
// workflow last stopped, or at its creation). Otherwise the record stands,
// also in the moment between a yield's write of it and the runner's
// clearing, when the activation has the yield's time but not its reason or
// queues.
func inMemoryWait(w *WaitingWorkflow, a *activation) bool {
	st, wk, fromRunner := a.workflowStatusWake()
	if st.Status == WorkflowRunning || workflowEnded(st.Status) {
		return false
	}
	if fromRunner {
		w.WakeAt, w.Reason, w.Queues, w.AnyQueue = wk.At, wk.AtReason, wk.Queues, wk.AnyQueue
	}
	w.InMemory = true
	return true
}
