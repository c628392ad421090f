package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// A GetOrCreate of an actor that another client keeps calling without
// create, in a tight loop, while it does not exist yet, creates it: each
// of those calls loads the missing actor and finds nothing, and the create
// must not be made to wait out load after load of them until it gives up
// (UNAVAILABLE "activation kept failing"). The calls before the create
// get NOT_FOUND, the ones after it reach the actor, and of a few such
// creates at once exactly one creates it.
func TestGetOrCreateIsNotStarvedByCallsWithoutCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t), nil)
	ref := runtime.Ref{Name: "counter", Key: []string{"contended"}}
	stop := make(chan struct{})
	var polls, notFound atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := e.host.Call(c, runtime.CallRequest{Ref: ref, Action: "getCount"})
				cancel()
				polls.Add(1)
				switch {
				case errors.Is(err, rivet.ErrNotFound):
					notFound.Add(1)
				case err != nil:
					t.Errorf("a call without create: %v, want NOT_FOUND or the count", err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// Let the calls run before the create comes.
	for deadline := time.Now().Add(10 * time.Second); notFound.Load() < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("the calls without create got %d NOT_FOUND in 10 s", notFound.Load())
		}
		time.Sleep(time.Millisecond)
	}
	var created atomic.Int64
	var creates sync.WaitGroup
	for range 3 {
		creates.Add(1)
		go func() {
			defer creates.Done()
			_, c, err := e.host.GetOrCreate(ctx(t), ref, nil)
			if err != nil {
				t.Errorf("GetOrCreate while calls without create poll the missing actor (%d calls so far): %v", polls.Load(), err)
			} else if c {
				created.Add(1)
			}
		}()
	}
	creates.Wait()
	if t.Failed() {
		return
	}
	if n := created.Load(); n != 1 {
		t.Fatalf("%d GetOrCreates say they created the actor, want 1", n)
	}
	// Calls find it now.
	if n, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "getCount"}); err != nil || string(n) != "0" {
		t.Fatalf("after the create, a call: %s, %v; want 0", n, err)
	}
}
