package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// runBody with the system clock times a step out through AfterFunc, with no
// goroutine of its own: the body's ctx ends at the timeout and the result
// says so; a body that returns in time is not reported as timed out.
func TestRunBodySystemClockTimeout(t *testing.T) {
	_, err, timedOut := runBody(context.Background(), 20*time.Millisecond, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !timedOut || !errors.Is(err, context.Canceled) {
		t.Fatalf("slow body: err %v, timedOut %v; want cancelled and timed out", err, timedOut)
	}
	var bodyCtx context.Context
	out, err, timedOut := runBody(context.Background(), time.Hour, SystemClock{}, func(ctx context.Context) (json.RawMessage, error) {
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
