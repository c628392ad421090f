package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultStore delays its commits at random, past SendTimeout at times,
// and fails some with errLost (outcome unknown), written or not. It checks
// that every txn it is given is one a caller made (recycled requests must
// never put a stale or cleared txn in a batch) and records the keys sent.
type faultStore struct {
	Store
	mu     sync.Mutex
	rng    *rand.Rand
	sent   map[string]bool
	broken []string
}

func (f *faultStore) Commit(ctx context.Context, txns ...Txn) error {
	f.mu.Lock()
	seen := map[string]bool{}
	for _, txn := range txns {
		if len(txn.Ops) != 1 || string(txn.Ops[0].Value) != txn.Ops[0].Key || seen[txn.Ops[0].Key] {
			f.broken = append(f.broken, fmt.Sprintf("%+v", txn))
			continue
		}
		k := txn.Ops[0].Key
		seen[k], f.sent[k] = true, true
		if want := strings.HasPrefix(k, "p"); want != (txn.Fence.Token != 0) {
			f.broken = append(f.broken, fmt.Sprintf("fence %+v on %s", txn.Fence, k))
		}
	}
	delay := time.Duration(f.rng.IntN(3000)) * time.Microsecond
	fault := f.rng.IntN(100)
	f.mu.Unlock()
	if fault < 3 {
		delay += 30 * time.Millisecond // past SendTimeout
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case fault < 6:
		return errLost
	case fault < 9:
		if err := f.Store.Commit(ctx, txns...); err != nil {
			return err
		}
		return errLost
	}
	return f.Store.Commit(ctx, txns...)
}

// Many callers commit through committers that batch, split, time out,
// doubt claims and stop under them, some leaving while their txn waits or
// is in flight: each caller gets its own txn's outcome, and no batch ever
// carries a txn that is not one of its callers' (requests are recycled:
// one reused while still referred to would show as another's txn or
// result).
func TestCommitterRecycledRequestsUnderFaults(t *testing.T) {
	m, fences := claimedMemory(t, 64)
	f := &faultStore{Store: m, rng: rand.New(rand.NewPCG(1, 2)), sent: map[string]bool{}}
	type outcome struct {
		key    string
		poison bool
		err    error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
	)
	end := time.Now().Add(2 * time.Second)
	for round := 0; time.Now().Before(end); round++ {
		c := NewCommitter(f, CommitterConfig{MaxInFlight: 2, StallAfter: 5 * time.Millisecond, MaxStalled: 2,
			SendTimeout: 20 * time.Millisecond, OnInDoubt: func([]Fence) {}})
		ctx, stop := context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- c.Run(ctx) }()
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var done chan error
				for i := 0; i < 1000; i++ {
					var txn Txn
					key := fmt.Sprintf("free/%d/%d/%d", round, g, i)
					if rng.IntN(2) == 0 {
						fi := rng.IntN(len(fences))
						txn.Fence = fences[fi]
						key = fmt.Sprintf("p%d/%d/%d/%d", fi, round, g, i)
					}
					txn.Ops = []Op{Put(key, []byte(key))}
					poison := rng.IntN(10) == 0
					if poison {
						txn.Conds = []Cond{Present("missing/" + key)}
					}
					cctx, ccancel := context.WithCancel(context.Background())
					if rng.IntN(4) == 0 {
						time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, ccancel)
					}
					err := c.CommitWith(cctx, txn, &done)
					ccancel()
					mu.Lock()
					outcomes = append(outcomes, outcome{key, poison, err})
					mu.Unlock()
					if errors.Is(err, ErrClosed) {
						return
					}
				}
			})
		}
		// Stopped once the store has been given some of this round's
		// txns, a random number of them, so that callers are committing
		// then: some queued, some in flight.
		f.mu.Lock()
		until := len(f.sent) + 50 + rand.IntN(400)
		f.mu.Unlock()
		waitUntil := time.Now().Add(10 * time.Second)
		for {
			f.mu.Lock()
			n := len(f.sent)
			f.mu.Unlock()
			if n >= until {
				break
			}
			if time.Now().After(waitUntil) {
				t.Fatalf("the store was given %d txns, waiting for %d, 10 s into round %d", n, until, round)
			}
			time.Sleep(time.Millisecond)
		}
		stop()
		callersDone := make(chan struct{})
		go func() { <-runDone; wg.Wait(); close(callersDone) }()
		select {
		case <-callersDone:
		case <-time.After(30 * time.Second):
			t.Fatal("callers not answered 30 s after their committer stopped")
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.broken) > 0 {
		t.Fatalf("%d txns the store was given were none of its callers': %v", len(f.broken), f.broken[:min(5, len(f.broken))])
	}
	counts := map[string]int{}
	for _, o := range outcomes {
		_, gerr := m.Get(context.Background(), o.key)
		written := gerr == nil
		switch {
		case o.err == nil:
			counts["committed"]++
			if o.poison || !written {
				t.Errorf("%s (poisoned %v) committed, written %v", o.key, o.poison, written)
			}
		case errors.Is(o.err, ErrNotSent) || errors.Is(o.err, ErrClosed):
			counts["not sent"]++
			if f.sent[o.key] || written {
				t.Errorf("%s: %v, but sent %v, written %v", o.key, o.err, f.sent[o.key], written)
			}
		case errors.Is(o.err, ErrConditionFailed):
			counts["condition failed"]++
			if !o.poison || written {
				t.Errorf("%s (poisoned %v): %v, written %v", o.key, o.poison, o.err, written)
			}
		case errors.Is(o.err, ErrFenced):
			counts["doubted"]++
			if written {
				t.Errorf("%s: %v, but written", o.key, o.err)
			}
		case OutcomeUnknown(o.err):
			counts["unknown"]++
			if o.poison && written {
				t.Errorf("%s poisoned, written (%v)", o.key, o.err)
			}
		default:
			t.Errorf("%s: unexpected %v", o.key, o.err)
		}
	}
	t.Logf("%d commits: %v", len(outcomes), counts)
}
