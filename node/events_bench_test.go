package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// BenchmarkEvents measures what events cost: 16 callers increment one
// counter (each increment broadcasts newCount once it is durable) while 0,
// 1, 16 or 64 subscribers read them through the Go client, on a real node
// (gRPC on loopback, embedded etcd). Reported: increments/s, events
// delivered/s (summed over the subscribers, until each has the last one),
// and gaps (subscriptions that fell 1,024 events behind and were made
// again). Compare the calls/s with BenchmarkCalls' mutate-hot at 16
// callers, the same load without any event.
func BenchmarkEvents(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	for _, subs := range []int{0, 1, 16, 64} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			h := c.Actor("counter", fmt.Sprintf("events-%d", subs))
			first, err := rivet.Call[int](ctx, h, "increment", 0)
			if err != nil {
				b.Fatal(err)
			}
			last := int64(first + b.N)
			var (
				delivered, gaps atomic.Int64
				caughtUp        sync.WaitGroup
			)
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			for range subs {
				sub, err := h.Subscribe(ctx, "newCount")
				if err != nil {
					b.Fatal(err)
				}
				defer sub.Close()
				caughtUp.Add(1)
				go func() {
					defer caughtUp.Done()
					for {
						ev, err := sub.Next(rctx)
						if err != nil {
							return
						}
						if ev.Gap {
							gaps.Add(1)
							continue
						}
						delivered.Add(1)
						var n int64
						if ev.Decode(&n) == nil && n >= last {
							return
						}
					}
				}()
			}
			do := make([]func() error, 16)
			for i := range do {
				do[i] = func() error { _, err := h.Call(ctx, "increment", 1); return err }
			}
			t0 := time.Now()
			rate, _ := driveCallers(b, do)
			done := make(chan struct{})
			go func() { caughtUp.Wait(); close(done) }()
			// A subscriber made again after a gap may have missed the
			// last increment: more come until every one has heard one
			// at least as late.
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			giveUp := time.After(time.Minute)
			var elapsed time.Duration
		wait:
			for {
				select {
				case <-done:
					elapsed = time.Since(t0)
					break wait
				case <-tick.C:
					if _, err := h.Call(ctx, "increment", 1); err != nil {
						b.Fatal(err)
					}
				case <-giveUp:
					b.Fatalf("subscribers not caught up within a minute of the last increment")
				}
			}
			b.ReportMetric(rate, "calls/s")
			b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(gaps.Load()), "gaps")
			b.ReportMetric(0, "ns/op")
		})
	}
}
