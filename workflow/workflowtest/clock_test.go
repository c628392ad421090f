package workflowtest

import (
	"context"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	due, _ := c.Timer(start)
	select {
	case <-due:
	default:
		t.Fatal("a timer already due did not fire")
	}
	a, _ := c.Timer(start.Add(time.Second))
	b, stopB := c.Timer(start.Add(2 * time.Second))
	stopB()
	if got := c.Timers(); len(got) != 1 || !got[0].Equal(start.Add(time.Second)) {
		t.Fatalf("timers %v", got)
	}
	c.Set(start.Add(-time.Hour)) // never backwards
	c.Advance(1500 * time.Millisecond)
	select {
	case at := <-a:
		if !at.Equal(start.Add(1500 * time.Millisecond)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("timer a did not fire")
	}
	c.Advance(time.Hour)
	select {
	case <-b:
		t.Fatal("a stopped timer fired")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.WaitTimers(ctx, 1) }()
	c.Timer(c.Now().Add(time.Minute))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := c.WaitTimers(ctx, 5); err == nil {
		t.Fatal("WaitTimers ignored its context")
	}
}
