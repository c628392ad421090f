package e2e

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
)

// nodeLoad is callers incrementing counters that one node owns, one
// counter each, through one client, until stop: the calls ended, how many
// failed, and the slowest (failed ones included). It measures what a fault
// elsewhere costs that node's actors.
type nodeLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu            sync.Mutex
	calls, failed int
	slowest       time.Duration
	// tried and acked count each key's increments sent and acknowledged;
	// errs holds the failed calls' errors.
	tried, acked map[string]int
	errs         []string
	// started is when each caller's call in flight began (zero: none);
	// last, when its last ended call began.
	started, last []time.Time
}

func startNodeLoad(t testing.TB, cl *client.Client, tab client.PartitionTable, node string, callers int) *nodeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &nodeLoad{cancel: cancel, started: make([]time.Time, callers), last: make([]time.Time, callers),
		tried: map[string]int{}, acked: map[string]int{}}
	for w := range callers {
		key := ownersOf(tab).key(t, "counter", fmt.Sprintf("%s-load%d-", node, w), func(o string) bool { return o == node })
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
				t0 := time.Now()
				l.mu.Lock()
				l.started[w] = t0
				l.tried[key]++
				l.mu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
				took := time.Since(t0)
				cancel()
				if ctx.Err() != nil {
					return // stopped: not a failure of the cluster
				}
				l.mu.Lock()
				l.started[w], l.last[w] = time.Time{}, t0
				l.calls++
				l.slowest = max(l.slowest, took)
				if err != nil {
					l.failed++
					l.errs = append(l.errs, err.Error())
				} else {
					l.acked[key]++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// waitCalls waits until the load has made n calls.
func (l *nodeLoad) waitCalls(t testing.TB, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		calls := l.calls
		l.mu.Unlock()
		if calls >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load: %d calls within %v, want %d", calls, within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAcked waits until every caller has had an increment acknowledged
// since it was called.
func (l *nodeLoad) waitAcked(t testing.TB, within time.Duration) {
	t.Helper()
	l.mu.Lock()
	before := maps.Clone(l.acked)
	l.mu.Unlock()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		var behind []string
		for key := range l.tried {
			if l.acked[key] <= before[key] {
				behind = append(behind, key)
			}
		}
		l.mu.Unlock()
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load: no increment acknowledged within %v on %v", within, behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPast waits until no call that began before t is in flight and every
// caller has ended a call that began after t.
func (l *nodeLoad) waitPast(t testing.TB, at time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		done := true
		for w := range l.started {
			if (!l.started[w].IsZero() && l.started[w].Before(at)) || !l.last[w].After(at) {
				done = false
			}
		}
		l.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load: calls from before %v not over, or callers without a call since, within %v", at.Format(time.StampMilli), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the load and waits for its callers; the figures are final.
func (l *nodeLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}
