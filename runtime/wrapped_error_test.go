package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// detailErr is an error type of the callee's own, which it wraps with its
// rivet error: nothing of it crosses the wire.
type detailErr struct{}

func (detailErr) Error() string { return "db pg://secret" }

type wrapState struct{}

var wrapCallee = rivet.Actor[wrapState]{
	Name: "wrapCallee",
	Actions: rivet.Actions[wrapState]{
		"refuse": rivet.Action0(func(*rivet.ActionCtx[wrapState]) (int, error) {
			return 0, fmt.Errorf("reserve (%w): %w", detailErr{}, rivet.UserError("out_of_stock", "out of stock", map[string]int{"left": 0}))
		}),
	},
}

// wrapCaller says what its call of wrapCallee got, as a caller on another
// node would read it.
var wrapCaller = rivet.Actor[wrapState]{
	Name: "wrapCaller",
	Actions: rivet.Actions[wrapState]{
		"call": rivet.Action0(func(c *rivet.ActionCtx[wrapState]) (string, error) {
			_, err := c.Client().GetOrCreate("wrapCallee", "k").Call(c.Context(), "refuse")
			var re *rivet.Error
			if !errors.As(err, &re) {
				return "", fmt.Errorf("not a rivet error: %v", err)
			}
			return fmt.Sprintf("%s|%s|%s|%v", err, re.Code, re.Metadata, errors.As(err, new(detailErr))), nil
		}),
	},
}

// An action's rivet error that it wrapped reaches a caller as the rivet
// error alone, wherever the caller is: the wire carries only that to a
// client or an actor of another node, and an actor of the same node got
// the wrapper's text and types as well (a one-node test saw what a
// cluster would not).
func TestAWrappedRivetErrorReachesACallerAsItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, wrapCallee, wrapCaller), nil)
	raw, err := call(t, e.host, "wrapCaller", "k", "call", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"out of stock|out_of_stock|{\"left\":0}|false"`; string(raw) != want {
		t.Fatalf("an actor of the same node got %s, want %s", raw, want)
	}
	_, err = e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "wrapCallee", Key: []string{"k"}}, Action: "refuse", Args: []byte("[]"), CreateIfMissing: true})
	if err == nil || err.Error() != "out of stock" || errors.As(err, new(detailErr)) || !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("the host's caller got %v (%T), want the user error alone", err, err)
	}
}

// The wrapper of a rivet error an action returned is kept on the callee's
// side, once, since its caller no longer gets it: on the action's span
// (whose status says the rivet error) and in a debug line.
func TestAWrappedRivetErrorsTextIsKeptOnTheCalleesSide(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	core, logs := observer.New(zap.DebugLevel)
	e := newEnv(t, counterReg(t, wrapCallee), func(c *runtime.Config) {
		c.TracerProvider = tp
		c.Logger = zap.New(core)
	})
	_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "wrapCallee", Key: []string{"k"}}, Action: "refuse", Args: []byte("[]"), CreateIfMissing: true})
	if err == nil || err.Error() != "out of stock" {
		t.Fatalf("the caller got %v, want the user error alone", err)
	}
	const full = "reserve (db pg://secret): out of stock"
	if lines := logs.FilterMessageSnippet("wrapped").All(); len(lines) != 1 || lines[0].Level != zap.DebugLevel || lines[0].ContextMap()["error"] != full {
		t.Fatalf("log lines of the wrapper: %v, want one debug line with %q", lines, full)
	}
	var events []string
	for _, s := range rec.Ended() {
		if !strings.HasPrefix(s.Name(), "rivet.action ") {
			continue
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if kv.Key == "exception.message" {
					events = append(events, kv.Value.AsString())
				}
			}
		}
	}
	if !slices.Equal(events, []string{full}) {
		t.Fatalf("the action span's exception events say %q, want [%q]", events, full)
	}
}
