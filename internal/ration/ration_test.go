package ration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The first caller is let through, the next ones of the period are not,
// however many race for it; the first after the period is.
func TestEveryLetsOneThroughPerPeriod(t *testing.T) {
	var e Every
	var through atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if e.Allow(time.Hour) {
				through.Add(1)
			}
		})
	}
	wg.Wait()
	if n := through.Load(); n != 1 {
		t.Fatalf("%d callers let through in one period; want 1", n)
	}
	if !e.Allow(0) {
		t.Fatal("a caller after the period was not let through")
	}
}
