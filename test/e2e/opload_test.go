package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// opLoad is a load of durable operations whose loss or duplication can be
// counted exactly, for fault tests: each worker alternates a counter
// increment and a send of a uniquely named message to a reminderActor
// (due at once), whose workflow appends the message's text to its `fired`
// list. An acknowledged send must show up in that list exactly once; a send
// that failed may show up at most once (its outcome was unknown); no text
// may show up twice. A counter must end between its acknowledged and its
// attempted increments.
type opLoad struct {
	mu        sync.Mutex
	acked     map[string]string // text -> reminder key, sends acknowledged
	failed    map[string]string // text -> reminder key, sends that failed
	incAcked  map[string]int
	incTried  map[string]int
	errs      int
	cancelled int
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
}

// startLoad runs workers goroutines, each calling through clients in turn,
// over keys reminder and counter keys, until stop.
func startLoad(clients []*client.Client, workers, keys int, tag string) *opLoad {
	l := &opLoad{
		acked: map[string]string{}, failed: map[string]string{},
		incAcked: map[string]int{}, incTried: map[string]int{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// Bounded in count as well as by stop.
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				cl := clients[(w+i)%len(clients)]
				key := fmt.Sprintf("%s%d", tag, (w*7+i)%keys)
				if i%2 == 0 {
					l.increment(ctx, cl, key)
				} else {
					l.send(ctx, cl, key, fmt.Sprintf("%s-%d-%d", tag, w, i))
				}
			}
		}()
	}
	return l
}

func (l *opLoad) increment(ctx context.Context, cl *client.Client, key string) {
	l.mu.Lock()
	l.incTried[key]++
	l.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.incAcked[key]++
	} else {
		l.fail(ctx)
	}
}

func (l *opLoad) send(ctx context.Context, cl *client.Client, key, text string) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := cl.GetOrCreate("reminderActor", key).Send(cctx, "reminders", map[string]any{"text": text, "at": 0})
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.acked[text] = key
	} else {
		l.failed[text] = key
		l.fail(ctx)
	}
}

// fail counts an error the load saw; the calls that stop cancels are
// counted apart (they may or may not have been applied).
func (l *opLoad) fail(ctx context.Context) {
	if ctx.Err() != nil {
		l.cancelled++
		return
	}
	l.errs++
}

// stop ends the load and waits for its workers. It may be called again
// (a test defers it, for the paths that fail before they stop the load).
func (l *opLoad) stop() {
	l.stopOnce.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// loadReport is what a fault did to the load.
type loadReport struct {
	ops, errs, cancelled, lost, duplicated, unknownApplied int
}

func (r loadReport) String() string {
	return fmt.Sprintf("%d operations acknowledged, %d failed and %d cancelled by the load's end (%d of those applied), %d lost, %d duplicated",
		r.ops, r.errs, r.cancelled, r.unknownApplied, r.lost, r.duplicated)
}

// verify reads every actor the load touched through cl (waiting up to
// within for the workflows to process what was sent) and counts lost and
// duplicated operations.
func (l *opLoad) verify(t *testing.T, cl *client.Client, within time.Duration) loadReport {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx := context.Background()
	r := loadReport{errs: l.errs, cancelled: l.cancelled}
	for _, n := range l.incAcked {
		r.ops += n
	}
	r.ops += len(l.acked)

	// Counters: every acknowledged increment is there, none beyond those
	// attempted.
	for key, tried := range l.incTried {
		var n int
		err := retryRead(within, func() (e error) {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			n, e = rivet.Call[int](cctx, cl.Get("counter", key), "getCount")
			return e
		})
		if err != nil {
			t.Fatalf("getCount %s: %v", key, err)
		}
		if n < l.incAcked[key] {
			r.lost += l.incAcked[key] - n
		}
		if n > tried {
			r.duplicated += n - tried
		}
		r.unknownApplied += max(0, min(n, tried)-l.incAcked[key])
	}

	// Sends: wait until every acknowledged text has fired, then count
	// (the keys that only saw failed sends are read too: a failed send
	// may have been applied, but only once).
	byKey := map[string][]string{}
	for _, key := range l.failed {
		byKey[key] = nil
	}
	for text, key := range l.acked {
		byKey[key] = append(byKey[key], text)
	}
	fired := map[string][]string{}
	deadline := time.Now().Add(within)
	for key, want := range byKey {
		for {
			var st struct{ Fired []string }
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			raw, err := cl.Get("reminderActor", key).Call(cctx, "getState")
			cancel()
			if err == nil && json.Unmarshal(raw, &st) == nil {
				fired[key] = st.Fired
				if containsAll(st.Fired, want) {
					break
				}
			}
			if time.Now().After(deadline) {
				break // counted as lost below
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	seen := map[string]int{}
	for _, texts := range fired {
		for _, x := range texts {
			seen[x]++
		}
	}
	for text := range l.acked {
		if seen[text] == 0 {
			r.lost++
			t.Errorf("acknowledged send %q (reminderActor %s) never fired", text, l.acked[text])
		}
	}
	for text, n := range seen {
		if n > 1 {
			r.duplicated += n - 1
			t.Errorf("send %q fired %d times", text, n)
		}
		if _, ok := l.failed[text]; ok {
			r.unknownApplied++
		}
	}
	return r
}

func containsAll(have, want []string) bool {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}

// retryRead calls read until it succeeds or within has passed.
func retryRead(within time.Duration, read func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := read()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
