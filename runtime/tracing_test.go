package runtime_test

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rivet-go/rivet"
	rt "github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A step attempt's span ends with the attempt: a failed one's with an
// error status, and one whose body called runtime.Goexit (t.Fatal in a
// test's actor), which ends the step's goroutine, with that error, rather
// than left open and never exported.
func TestAStepAttemptsSpanEndsWithItsError(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "tracedsteps",
		Run: func(c *workflow.Ctx[st]) error {
			err := c.StepWith(workflow.StepOptions{Name: "fails", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[st]) error {
				return rivet.Errorf(rivet.ErrFailedPrecondition, "refused on purpose")
			})
			if err == nil {
				return nil
			}
			return c.Step("exits", func(s *workflow.StepCtx[st]) error {
				runtime.Goexit()
				return nil
			})
		},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, counterReg(t, a), func(c *rt.Config) { c.TracerProvider = tp })
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "tracedsteps", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "tracedsteps", "k").WorkflowStatus == rt.WorkflowFailed
	})
	status := map[string]otelcodes.Code{}
	waitFor(t, "both steps' spans to end", 10*time.Second, func() bool {
		for _, s := range rec.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Key == "rivet.workflow.step" {
					status[kv.Value.AsString()] = s.Status().Code
				}
			}
		}
		return len(status) == 2
	})
	if status["fails"] != otelcodes.Error || status["exits"] != otelcodes.Error {
		t.Fatalf("step spans' statuses %v, want both errors", status)
	}
}

// An action that calls runtime.Goexit (t.Fatal in a test's actor) ends its
// span, and the span of the call to it that its caller's code made, with
// an error: its caller gets no answer, which is no success.
func TestAnActionThatCallsGoexitEndsItsSpanWithAnError(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "tracedexit",
		Actions: rivet.Actions[st]{
			"exit": rivet.Action(func(c *rivet.ActionCtx[st], _ int) (int, error) {
				runtime.Goexit()
				return 0, nil
			}),
			"callExit": rivet.Action(func(c *rivet.ActionCtx[st], _ int) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().GetOrCreate("tracedexit", "other"), "exit", 0)
			}),
		},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, counterReg(t, a), func(c *rt.Config) { c.TracerProvider = tp })
	// CallLocal: the action's Goexit ends a goroutine of its own, not the
	// test's.
	_, err := e.host.CallLocal(ctx(t), rt.CallRequest{Ref: rt.Ref{Name: "tracedexit", Key: []string{"k"}}, Action: "callExit", Args: []byte(`[0]`), CreateIfMissing: true})
	if err == nil {
		t.Fatal("callExit succeeded")
	}
	status := map[string]otelcodes.Code{}
	waitFor(t, "the spans to end", 10*time.Second, func() bool {
		for _, s := range rec.Ended() {
			status[s.Name()] = s.Status().Code
		}
		return len(status) == 3
	})
	want := map[string]otelcodes.Code{
		"rivet.action tracedexit.callExit": otelcodes.Error,
		"rivet.call tracedexit.exit":       otelcodes.Error,
		"rivet.action tracedexit.exit":     otelcodes.Error,
	}
	if !maps.Equal(status, want) {
		t.Fatalf("spans' statuses %v, want %v", status, want)
	}
}

// An action's span marks when its turn began, and how long it waited for
// it behind the turns ahead of it on the same actor: a span of a second
// says whether the action ran that long or its callers queued (a hot
// actor). Here one call holds the actor for 300 ms while a second waits.
func TestAnActionsSpanSaysHowLongItWaitedForItsTurn(t *testing.T) {
	type st struct{ N int }
	const hold = 300 * time.Millisecond
	entered := make(chan struct{}, 2)
	a := rivet.Actor[st]{
		Name: "tracedwait",
		Actions: rivet.Actions[st]{
			"slow": rivet.Action(func(c *rivet.ActionCtx[st], _ int) (int, error) {
				entered <- struct{}{}
				time.Sleep(hold)
				return 0, nil
			}),
		},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, counterReg(t, a), func(c *rt.Config) { c.TracerProvider = tp })
	req := rt.CallRequest{Ref: rt.Ref{Name: "tracedwait", Key: []string{"k"}}, Action: "slow", Args: []byte(`[0]`), CreateIfMissing: true}
	first := make(chan error, 1)
	go func() {
		_, err := e.host.Call(ctx(t), req)
		first <- err
	}()
	<-entered
	if _, err := e.host.Call(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var waits []float64
	waitFor(t, "both actions' spans to end", 10*time.Second, func() bool {
		waits = waits[:0]
		for _, s := range rec.Ended() {
			if s.Name() != "rivet.action tracedwait.slow" {
				continue
			}
			for _, ev := range s.Events() {
				if ev.Name != "rivet.turn" {
					continue
				}
				for _, kv := range ev.Attributes {
					if kv.Key == "rivet.turn.wait_seconds" {
						waits = append(waits, kv.Value.AsFloat64())
					}
				}
			}
		}
		return len(waits) == 2
	})
	slices.Sort(waits)
	// The second waited for most of the first's hold; the first for none.
	if waits[0] > 0.1 || waits[1] < (hold/2).Seconds() {
		t.Fatalf("the two calls' spans say they waited %v s for their turns, want about 0 and about %v", waits, hold.Seconds())
	}
	// An operator's turn (Destroy) starts no span of its own: the one in
	// its context is its caller's (a node's RPC server span), which gets
	// no event of a turn that is not its own.
	dctx, caller := tp.Tracer("test").Start(ctx(t), "caller")
	if err := e.host.Destroy(dctx, req.Ref); err != nil {
		t.Fatal(err)
	}
	caller.End()
	for _, s := range rec.Ended() {
		if s.Name() == "caller" && len(s.Events()) != 0 {
			t.Errorf("the span of Destroy's caller has events %v, want none", s.Events())
		}
	}
}
