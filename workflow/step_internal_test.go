package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// runBody with the system clock times a step out through AfterFunc, with no
// goroutine of its own: the body's ctx ends at the timeout and the result
// says so; a body that returns in time is not reported as timed out.
func TestRunBodySystemClockTimeout(t *testing.T) {
	_, err, timedOut, _ := runBody(context.Background(), 20*time.Millisecond, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !timedOut || !errors.Is(err, context.Canceled) {
		t.Fatalf("slow body: err %v, timedOut %v; want cancelled and timed out", err, timedOut)
	}
	var bodyCtx context.Context
	out, err, timedOut, _ := runBody(context.Background(), time.Hour, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		bodyCtx = ctx
		return json.RawMessage(`1`), nil
	})
	if timedOut || err != nil || string(out) != "1" {
		t.Fatalf("quick body: %s, %v, timedOut %v", out, err, timedOut)
	}
	if bodyCtx.Err() == nil {
		t.Fatal("the body's ctx outlives the step")
	}
}

// A scope gives each name its place and refuses a name used twice, in a
// few names (kept in a slice) and in many (a map past scopeMapAbove).
func TestScopeClaimsEachNameOnce(t *testing.T) {
	for _, n := range []int{1, scopeMapAbove, scopeMapAbove + 1, 3 * scopeMapAbove} {
		sc := newScope("l/~2")
		for i := range n {
			p, seq, err := sc.claim("step", fmt.Sprintf("s%d", i))
			if err != nil || p != fmt.Sprintf("l/~2/s%d", i) || seq != i+1 {
				t.Fatalf("%d names: claim %d = %q, %d, %v", n, i, p, seq, err)
			}
		}
		for i := range n {
			var de *DivergenceError
			if _, _, err := sc.claim("step", fmt.Sprintf("s%d", i)); !errors.As(err, &de) {
				t.Fatalf("%d names: name %d claimed twice: %v", n, i, err)
			}
		}
		if _, seq, err := sc.claim("step", "new"); err != nil || seq != n+1 {
			t.Fatalf("%d names: a new name after the refusals: %d, %v", n, seq, err)
		}
	}
}

// A body that never looks at its context is timed out by the clock when it
// returns late (its context was never made), one that looks is cancelled
// at the deadline, children included, and context.Cause sees it; a context
// kept past the attempt is cancelled.
func TestRunBodyLazyContext(t *testing.T) {
	_, _, timedOut, _ := runBody(context.Background(), 5*time.Millisecond, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		time.Sleep(20 * time.Millisecond) // the overrun itself is the point
		return nil, nil
	})
	if !timedOut {
		t.Fatal("a body that overran its timeout without looking at its context is not reported as timed out")
	}
	_, err, timedOut, _ := runBody(context.Background(), 20*time.Millisecond, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		child, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		<-child.Done()
		if context.Cause(ctx) == nil {
			return nil, errors.New("context.Cause is nil on a cancelled step context")
		}
		return nil, child.Err()
	})
	if !timedOut || !errors.Is(err, context.Canceled) {
		t.Fatalf("a child context of a timed-out step: err %v, timedOut %v", err, timedOut)
	}
	parent, cancelParent := context.WithCancel(context.Background())
	_, err, timedOut, _ = runBody(parent, time.Hour, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		if ctx.Err() != nil {
			return nil, errors.New("cancelled before its parent")
		}
		cancelParent()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if timedOut || !errors.Is(err, context.Canceled) {
		t.Fatalf("a step whose parent ends: err %v, timedOut %v", err, timedOut)
	}
	var kept context.Context
	_, _, timedOut, _ = runBody(context.Background(), 0, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		kept = ctx
		return nil, nil
	})
	if timedOut {
		t.Fatal("a step without a timeout timed out")
	}
	select {
	case <-kept.Done():
	default:
		t.Fatal("a context kept past its attempt (never looked at during it) is not cancelled")
	}
}

// A step's context has its timeout as its deadline, or its parent's when
// that comes first, so that what the body calls plans by it.
func TestRunBodyContextHasTheStepsDeadline(t *testing.T) {
	start := time.Now()
	_, _, _, _ = runBody(context.Background(), time.Minute, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		d, ok := ctx.Deadline()
		if !ok || d.Before(start.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
			t.Errorf("deadline %v, %v; want about a minute from now", d, ok)
		}
		return nil, nil
	})
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pd, _ := parent.Deadline()
	_, _, _, _ = runBody(parent, time.Minute, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		if d, ok := ctx.Deadline(); !ok || !d.Equal(pd) {
			t.Errorf("deadline %v, %v; want the parent's, %v", d, ok, pd)
		}
		return nil, nil
	})
	_, _, _, _ = runBody(context.Background(), 0, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		if d, ok := ctx.Deadline(); ok {
			t.Errorf("a step without a timeout has the deadline %v", d)
		}
		return nil, nil
	})
}

// manualClock is an afterFuncClock whose time moves only when told and
// whose AfterFunc calls never fire on their own: a timer that has not run
// yet when the body returns.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time { return c.now }
func (c *manualClock) Timer(time.Time) (<-chan time.Time, func()) {
	return make(chan time.Time), func() {}
}
func (c *manualClock) AfterFunc(time.Time, func()) func() bool { return func() bool { return true } }

// A body that looked at its context (arming the deadline's timer) and
// returns past the deadline before the timer ran is timed out, as one that
// never looked is (the clock says so when it returns).
func TestRunBodyArmedOverrunBeforeItsTimerRan(t *testing.T) {
	clk := &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	_, err, timedOut, _ := runBody(context.Background(), time.Second, clk, func(ctx context.Context) (json.RawMessage, error) {
		_ = ctx.Done()
		clk.now = clk.now.Add(2 * time.Second)
		return nil, nil
	})
	if !timedOut || err != nil {
		t.Fatalf("err %v, timedOut %v; want timed out", err, timedOut)
	}
}
