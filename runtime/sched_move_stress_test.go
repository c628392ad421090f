package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// Scheduled calls of actors whose partition moves back and forth between
// two hosts, again and again while calls run, each run once: no one-off
// call is lost or run twice, and the recurring one keeps its cadence (no
// run twice, none caught up).
func TestScheduledCallsRunOnceAcrossRepeatedHandoffs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, testactors.Tally), nil)
	h2, own2 := secondHost(t, e)
	part := func(key string) uint32 {
		return placement.Partition("tally", storage.EncodeKey([]string{key}), testPartitions)
	}
	p := part("k0")
	var keys []string
	for i := 0; len(keys) < 4 && i < 10000; i++ {
		if k := fmt.Sprintf("k%d", i); part(k) == p {
			keys = append(keys, k)
		}
	}
	const n = 30
	for _, k := range keys {
		if got := callInt(t, e.host, "tally", k, "plan", true, n, 100); got != n {
			t.Fatalf("plan %s: %d", k, got)
		}
	}
	hosts := []*runtime.Host{e.host, h2}
	owns := []*runtime.Ownership{e.own, own2}
	var cur atomic.Int32 // the host serving p

	// Calls run against whichever host serves p meanwhile.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			h := hosts[cur.Load()]
			if _, err := call(t, h, "tally", keys[i%len(keys)], "poke", false); err != nil && !errors.Is(err, rivet.ErrUnavailable) {
				t.Errorf("poke: %v", err)
				return
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for moves := 0; moves < 40 && time.Now().Before(deadline); moves++ {
		from := cur.Load()
		to := 1 - from
		if err := hosts[from].Handoff(ctx(t), p); err != nil {
			t.Fatal(err)
		}
		if got, err := owns[to].Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v", got, err)
		}
		cur.Store(to)
		// Let a few calls come due between moves.
		time.Sleep(time.Duration(50+moves*7%90) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	h := hosts[cur.Load()]
	get := func(k string) testactors.TallyState {
		raw, err := call(t, h, "tally", k, "get", false)
		if err != nil {
			t.Fatal(err)
		}
		var st testactors.TallyState
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, k := range keys {
		waitFor(t, "every call of "+k, 20*time.Second, func() bool { return len(get(k).Hits) == n })
	}
	// Two more beats after the last call came due: a call run twice by a
	// stray timer would have run by then.
	for _, k := range keys {
		b0 := len(get(k).Beats)
		waitFor(t, "two more beats of "+k, 10*time.Second, func() bool { return len(get(k).Beats) >= b0+2 })
	}
	for _, k := range keys {
		st := get(k)
		for tag, c := range st.Hits {
			if c != 1 {
				t.Errorf("%s: call %s ran %d times", k, tag, c)
			}
		}
		for i := 1; i < len(st.Beats); i++ {
			d := st.Beats[i] - st.Beats[i-1]
			if d <= 0 || d%1000 != 0 {
				t.Errorf("%s: beats %v: run %d due %d ms after the one before", k, st.Beats, i, d)
				break
			}
		}
	}
}

// Operators cancel scheduled calls while the partition moves back and
// forth and the calls come due: a call whose cancel said it cancelled
// never runs, and every other runs once.
func TestCancelledCallsNeverRunAcrossRepeatedHandoffs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, testactors.Tally), nil)
	h2, own2 := secondHost(t, e)
	const key, n = "x", 60
	p := placement.Partition("tally", storage.EncodeKey([]string{key}), testPartitions)
	raw, err := call(t, e.host, "tally", key, "planIDs", true, n, 60)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil || len(ids) != n {
		t.Fatalf("ids %s: %v", raw, err)
	}
	hosts := []*runtime.Host{e.host, h2}
	owns := []*runtime.Ownership{e.own, own2}
	var cur atomic.Int32
	ref := runtime.Ref{Name: "tally", Key: []string{key}}

	// Every other call is cancelled, each at about its time, through
	// whichever host serves the partition, until one answers.
	cancelled := make([]bool, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for i := 1; i < n; i += 2 {
			due := start.Add(300*time.Millisecond + time.Duration(i*60-5)*time.Millisecond)
			time.Sleep(time.Until(due))
			for try := 0; try < 200; try++ {
				ok, err := hosts[cur.Load()].CancelScheduledCall(ctx(t), ref, ids[i])
				if err == nil {
					cancelled[i] = ok
					break
				}
				if !errors.Is(err, rivet.ErrUnavailable) {
					t.Errorf("cancel %d: %v", i, err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for moves := 0; moves < 60 && time.Now().Before(deadline); moves++ {
		from := cur.Load()
		to := 1 - from
		if err := hosts[from].Handoff(ctx(t), p); err != nil {
			t.Fatal(err)
		}
		if got, err := owns[to].Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v", got, err)
		}
		cur.Store(to)
		time.Sleep(time.Duration(20+moves*13%70) * time.Millisecond)
	}
	wg.Wait()
	h := hosts[cur.Load()]
	waitFor(t, "no call left", 20*time.Second, func() bool {
		ins, err := h.Inspect(ctx(t), ref)
		return err == nil && len(ins.Schedules) == 0
	})
	raw, err = call(t, h, "tally", key, "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var st testactors.TallyState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	nc := 0
	for i := range n {
		tag := fmt.Sprintf("c%d", i)
		switch {
		case cancelled[i]:
			nc++
			if st.Hits[tag] != 0 {
				t.Errorf("call %d ran %d times after its cancel said it cancelled it", i, st.Hits[tag])
			}
		case st.Hits[tag] != 1:
			t.Errorf("call %d (not cancelled) ran %d times", i, st.Hits[tag])
		}
	}
	t.Logf("%d calls cancelled", nc)
}

// Scheduled calls of a node that loses its lease (a stall: renewals do not
// arrive, the watchdog drops every claim, the node claims them again under
// a new lease) while they come due run once each, and the recurring one
// keeps its cadence.
func TestScheduledCallsRunOnceAcrossALeaseLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, testactors.Tally), nil)
	keys := []string{"a", "b", "c"}
	const n = 20
	for _, k := range keys {
		if got := callInt(t, e.host, "tally", k, "plan", true, n, 200); got != n {
			t.Fatalf("plan %s: %d", k, got)
		}
	}
	p := placement.Partition("tally", storage.EncodeKey([]string{"a"}), testPartitions)
	// A loss takes about as long as the calls take to come due (4 s):
	// they come due before, during and after it.
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	e.own.ExpireLocally()
	waitFor(t, "the lease to be lost", 20*time.Second, func() bool { _, l := e.own.LeaseStats(); return l > lost })
	e.store.muteRenewals.Store(false)
	waitFor(t, "the partitions claimed again", 20*time.Second, func() bool { return e.host.Owns(p) })
	get := func(k string) testactors.TallyState {
		var st testactors.TallyState
		waitFor(t, "a read of "+k, 20*time.Second, func() bool {
			raw, err := call(t, e.host, "tally", k, "get", false)
			return err == nil && json.Unmarshal(raw, &st) == nil
		})
		return st
	}
	b0 := map[string]int{}
	for _, k := range keys {
		waitFor(t, "every call of "+k, 30*time.Second, func() bool { return len(get(k).Hits) == n })
		b0[k] = len(get(k).Beats)
	}
	for _, k := range keys {
		waitFor(t, "two more beats of "+k, 10*time.Second, func() bool { return len(get(k).Beats) >= b0[k]+2 })
	}
	for _, k := range keys {
		st := get(k)
		for tag, c := range st.Hits {
			if c != 1 {
				t.Errorf("%s: call %s ran %d times", k, tag, c)
			}
		}
		for i := 1; i < len(st.Beats); i++ {
			if d := st.Beats[i] - st.Beats[i-1]; d <= 0 || d%1000 != 0 {
				t.Errorf("%s: beats %v: run %d due %d ms after the one before", k, st.Beats, i, d)
				break
			}
		}
	}
}
