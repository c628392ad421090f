package answerby

import (
	"context"
	"testing"
	"time"
)

// The margins of By, and Wait's wait, for a few deadlines: Wait waits at
// least half the time left, where By leaves a call with 50 ms none.
func TestMargins(t *testing.T) {
	for _, c := range []struct {
		left, byMargin, waitMargin time.Duration
	}{
		{50 * time.Millisecond, 50 * time.Millisecond, 25 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
		{400 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 200 * time.Millisecond, 200 * time.Millisecond},
		{20 * time.Second, time.Second, time.Second},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), c.left)
		dl, _ := ctx.Deadline()
		by, ok := By(ctx)
		wait, wok := Wait(ctx)
		cancel()
		const slack = 10 * time.Millisecond // the time the test took between them
		if m := dl.Sub(by); !ok || m < c.byMargin-slack || m > c.byMargin+slack {
			t.Errorf("%v left: By's margin %v; want %v", c.left, m, c.byMargin)
		}
		if m := dl.Sub(wait); !wok || m < c.waitMargin-slack || m > c.waitMargin+slack {
			t.Errorf("%v left: Wait's margin %v; want %v", c.left, m, c.waitMargin)
		}
	}
	if _, ok := Wait(context.Background()); ok {
		t.Error("Wait of a context without a deadline: ok")
	}
}
