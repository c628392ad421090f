package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

const (
	moverA = 24 // messages sent to queue "a", without waiting
	moverB = 12 // messages sent to queue "b", each waiting for its completion
)

var mover = testactors.Shuttle("mover", moverA, moverB)

type moverState = testactors.ShuttleState

// A workflow in the middle of joins, races, timed receives, sleeps and
// retried steps, with messages arriving (some senders waiting for their
// completion), moved back and forth between two hosts many times: every
// message is taken once, every committed step's effect is there once per
// iteration, every waiting sender hears of its completion or that its
// message is queued, the sleeps fire on whichever host owns the workflow,
// and it ends as it would have without the moves.
func TestAWorkflowMovedRepeatedlyMidJoinAndRaceLosesNothing(t *testing.T) {
	t.Parallel()
	testWorkflowMoves(t, false)
}

// The same, some handoffs running out of time and evicting the workflow
// wherever it is.
func TestAWorkflowMovedRepeatedlyByHandoffsOutOfTime(t *testing.T) {
	t.Parallel()
	testWorkflowMoves(t, true)
}

func testWorkflowMoves(t *testing.T, evictSome bool) {
	e := newEnv(t, counterReg(t, mover), nil)
	h2, own2 := secondHost(t, e)
	ref := runtime.Ref{Name: "mover", Key: []string{"m"}}
	p := placement.Partition("mover", storage.EncodeKey(ref.Key), testPartitions)
	hosts := []*runtime.Host{e.host, h2}
	owns := []*runtime.Ownership{e.own, own2}
	tctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, _, err := e.host.GetOrCreate(tctx, ref, nil); err != nil {
		t.Fatal(err)
	}

	// owner is the host serving p now, or nil while it moves.
	owner := func() *runtime.Host {
		for _, h := range hosts {
			if h.Owns(p) {
				return h
			}
		}
		return nil
	}
	// send sends body to queue q until a host takes it (the key makes
	// retries safe), and returns what that host said.
	send := func(q string, body int, wait bool) (runtime.SendResult, error) {
		var last error
		for attempt := 0; attempt < 3000 && tctx.Err() == nil; attempt++ {
			h := owner()
			if h == nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			res, err := h.Send(tctx, runtime.SendRequest{
				Ref: ref, Queue: q, Body: json.RawMessage(fmt.Sprint(body)),
				Wait: wait, Timeout: 30 * time.Second, IdempotencyKey: fmt.Sprintf("%s-%d", q, body),
			})
			if err == nil {
				return res, nil
			}
			if !errors.Is(err, rivet.ErrUnavailable) {
				// A node's UNAVAILABLE says "not queued"; anything else
				// after a move would be a sender left in doubt.
				t.Errorf("send %s %d during the moves: %v", q, body, err)
			}
			last = err
			time.Sleep(5 * time.Millisecond)
		}
		return runtime.SendResult{}, fmt.Errorf("send %s %d never taken: %v (%v)", q, body, last, tctx.Err())
	}

	var wg sync.WaitGroup
	// The senders call t.Errorf: a Fatalf below must not end the test
	// while they run (deferred calls run last-in first-out: cancel, then
	// wait).
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, moverA+moverB)
	testactors.ShuttleTraffic(&wg, errs, moverA, moverB, send)

	get := func(h *runtime.Host) (moverState, bool) {
		out, err := h.Call(tctx, runtime.CallRequest{Ref: ref, Action: "get"})
		if err != nil {
			return moverState{}, false
		}
		var s moverState
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatal(err)
		}
		return s, true
	}
	// Move the workflow back and forth, each time once it has made some
	// progress on its owner, while it runs.
	cur, moves := 0, 0
	for move := 0; move < 30; move++ {
		s0, ok := get(hosts[cur])
		if !ok {
			t.Fatalf("move %d: host %d does not serve the workflow", move, cur)
		}
		if s0.Iters > 0 && len(s0.GotA) >= moverA && len(s0.GotB) >= moverB {
			break
		}
		waitFor(t, fmt.Sprintf("progress before move %d", move), 20*time.Second, func() bool {
			s, ok := get(hosts[cur])
			return ok && (s.Iters > s0.Iters || s.Work > s0.Work || len(s.GotA) > len(s0.GotA) || len(s.GotB) > len(s0.GotB))
		})
		// Not for synchronisation: to move at varied points of the
		// iteration (a receive, a backoff, a sleep, a race's end).
		time.Sleep(time.Duration(rand.IntN(80)) * time.Millisecond)
		// Some handoffs run out of time, and evict what is left.
		hto := 15 * time.Second
		if evictSome && rand.IntN(2) == 0 {
			hto = time.Duration(rand.IntN(30)) * time.Millisecond
		}
		hctx, hcancel := context.WithTimeout(tctx, hto)
		if err := hosts[cur].Handoff(hctx, p); err != nil {
			t.Fatalf("move %d: handoff: %v", move, err)
		}
		hcancel()
		cur = 1 - cur
		moves++
		if got, err := owns[cur].Claim(tctx, []uint32{p}); err != nil || len(got) != 1 {
			t.Fatalf("move %d: claim: %v, %v", move, got, err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	endBy := time.Now().Add(30 * time.Second)
	for {
		ins, err := hosts[cur].Inspect(tctx, ref)
		if err == nil && (ins.WorkflowStatus == runtime.WorkflowFailed) {
			t.Fatalf("workflow failed: %+v", ins)
		}
		if err == nil && ins.WorkflowStatus == runtime.WorkflowCompleted {
			break
		}
		if time.Now().After(endBy) {
			hist, herr := hosts[cur].History(tctx, ref)
			var hs []string
			for _, e := range hist.Entries {
				hs = append(hs, fmt.Sprintf("%s %s %s att=%d out=%s err=%s win=%s at=%s", e.Path, e.Kind, e.Status, e.Attempts, e.Output, e.Error, e.Winner, e.UpdatedAt.Format("15:04:05.000")))
			}
			wk, hasWk := hosts[cur].NextWakeup(ref)
			t.Fatalf("the workflow did not end: %+v, %v\nnow %v next wakeup %v %v\nhistory (%v):\n%s", ins, err, time.Now().Format("15:04:05.000"), wk.Format("15:04:05.000"), hasWk, herr, strings.Join(hs, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	s, ok := get(hosts[cur])
	if !ok {
		t.Fatal("no state at the end")
	}
	for _, bad := range s.Check(moverA, moverB) {
		t.Error(bad)
	}
	t.Logf("%d moves, %d iterations", moves, s.Iters)
}
