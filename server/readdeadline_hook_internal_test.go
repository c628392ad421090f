package server

import (
	"context"
	"net"
	"testing"
	"time"
)

// The streams a sweep drops are all dropped before the first is told:
// OnRequestReadTimeout's hook, slow as it may be, delays no drop, as it
// did not with a timer (and its goroutine) per stream.
func TestReadDeadlineSlowHookDelaysNoDrop(t *testing.T) {
	release := make(chan struct{})
	sw := newSweeper(10*time.Second, func(net.Addr) { <-release })
	sw.tick = time.Hour
	defer sw.timer.Stop()
	a := sw.withReadDeadline(context.Background())
	b := sw.withReadDeadline(context.Background())
	swept := make(chan struct{})
	go func() { defer close(swept); sweepsBy(sw, int(sw.life)) }()
	defer func() { close(release); <-swept }()
	for i, ctx := range []context.Context{a, b} {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d not dropped within 10 s while the hook of a drop waits", i)
		}
	}
}
