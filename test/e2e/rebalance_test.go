package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A 4th node (not an etcd member: it uses the three members as external
// etcd) joins under a counter load; partitions move to it, and no call
// fails (the Go client retries the brief UNAVAILABLE of a handoff). Then
// `rivetctl drain node4` moves them back, and node4 stops with nothing to
// hand over. The load's error count is reported and must be zero.
func TestJoinAndDrainUnderLoad(t *testing.T) {
	c := newCluster(t, 3, nil)
	ids := []string{"node1", "node2", "node3"}
	c.waitBalanced(0, ids, 30*time.Second)
	cl := c.client(0)

	var (
		mu     sync.Mutex
		acked  = map[string]int{}
		calls  atomic.Int64
		failed atomic.Int64
		errs   []string
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 1000000; i++ {
				key := fmt.Sprintf("j%d", (w*13+i)%64)
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
				cancel()
				calls.Add(1)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						mu.Lock()
						if len(errs) < 5 {
							errs = append(errs, err.Error())
						}
						mu.Unlock()
					}
					continue
				}
				mu.Lock()
				acked[key]++
				mu.Unlock()
			}
		}()
	}
	waitCalls := func(n int64) {
		t.Helper()
		target := calls.Load() + n
		deadline := time.Now().Add(30 * time.Second)
		for calls.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("the load stalled: %d calls", calls.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCalls(200)

	// Sleeping workflows that the moves carry along: 20 reminders due
	// while partitions move to node4 and back.
	dueFrom := time.Now().Add(2 * time.Second)
	for i := range 20 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cl.GetOrCreate("reminderActor", fmt.Sprintf("m%d", i)).Send(cctx, "reminders", map[string]any{"text": fmt.Sprintf("m%d", i), "at": dueFrom.Add(time.Duration(i) * 100 * time.Millisecond).UnixMilli()})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Join.
	n4 := c.externalNode("node4")
	joinAt := time.Now()
	n4.start()
	c.nodes = append(c.nodes, n4)
	c.waitBalanced(0, append(ids, "node4"), 60*time.Second)
	t.Logf("FIGURE join: node4 owns partitions %v after it started", time.Since(joinAt).Round(time.Millisecond))
	waitCalls(200)

	// Drain it again.
	drainAt := time.Now()
	out, errOut, code := n4.rivetctl("drain", "node4")
	if code != 0 || !strings.Contains(out, "drained node4") {
		t.Fatalf("rivetctl drain node4: %q (stderr %q, exit %d)\n%s", out, errOut, code, c.logs())
	}
	t.Logf("FIGURE drain: %s (%v)", out, time.Since(drainAt).Round(time.Millisecond))
	c.waitBalanced(0, ids, 30*time.Second)
	waitCalls(200)
	if err := n4.stop(); err != nil {
		t.Fatalf("stop node4: %v", err)
	}
	waitCalls(200)
	stop()
	wg.Wait()

	t.Logf("FIGURE load: %d calls, %d failed", calls.Load(), failed.Load())
	for i := range 20 {
		waitState(t, c.nodes[i%3], "reminderActor", fmt.Sprintf("m%d", i), 30*time.Second, fmt.Sprintf(`{"fired":["m%d"]}`, i))
	}
	if failed.Load() > 0 {
		t.Errorf("%d calls failed during join and drain, e.g. %q", failed.Load(), errs)
	}
	// Nothing acknowledged was lost in the moves.
	for key, n := range acked {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := cl.Get("counter", key).Call(cctx, "getCount")
		cancel()
		if err != nil {
			t.Fatalf("getCount %s: %v", key, err)
		}
		var got int
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("getCount %s = %s: %v", key, out, err)
		}
		if got < n {
			t.Errorf("counter %s = %d, below the %d acknowledged increments", key, got, n)
		}
	}
}
