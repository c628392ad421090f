package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type overrunState struct {
	N int `json:"n"`
}

// An action that ignores its context runs past the node's action timeout
// until it returns, holding its actor: the node logs it at WARN, naming
// the actor, its key, the action and how long past its timeout it
// returned (a user trial: a 65 s action under the 60 s timeout returned
// "done", counted ok, and left no line). What it did stands, as before:
// one that changed nothing has its result reach a caller still waiting;
// one that changed the state has its changes committed, and its caller
// gets a timeout error all the same, as does a caller whose own deadline
// ended first. An action that returns when its context ends is not
// logged.
func TestAnActionThatIgnoresItsTimeoutIsLogged(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	const overrun = 600 * time.Millisecond
	act := rivet.Actor[overrunState]{
		Name: "overrunAction",
		Actions: rivet.Actions[overrunState]{
			"report": rivet.Action0(func(c *rivet.ActionCtx[overrunState]) (int, error) {
				time.Sleep(timeout + overrun) // the overrun is the point: it never looks at its context
				c.State.N++
				return c.State.N, nil
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[overrunState]) (int, error) {
				time.Sleep(timeout + overrun)
				return c.State.N, nil
			}),
			"polite": rivet.Action0(func(c *rivet.ActionCtx[overrunState]) (int, error) {
				<-c.Context().Done()
				return 0, c.Context().Err()
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[overrunState]) (int, error) { return c.State.N, nil }),
		},
	}
	core, logs := observer.New(zap.WarnLevel)
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) {
		c.Logger = zap.New(core)
		c.ActionTimeout = timeout
	})
	ref := runtime.Ref{Name: "overrunAction", Key: []string{"doc4"}}
	callWith := func(ctx context.Context, action string) (json.RawMessage, error) {
		return e.host.Call(ctx, runtime.CallRequest{Ref: ref, Action: action, CreateIfMissing: true})
	}
	overruns := func() []observer.LoggedEntry {
		var found []observer.LoggedEntry
		for _, l := range logs.All() {
			if _, ok := l.ContextMap()["past_timeout"]; ok {
				found = append(found, l)
			}
		}
		return found
	}
	check := func(n int, action string, gaveUp bool) {
		t.Helper()
		waitFor(t, fmt.Sprintf("overrun warning %d", n), 10*time.Second, func() bool { return len(overruns()) >= n })
		found := overruns()
		if len(found) != n {
			t.Fatalf("%d overrun lines, want %d: %+v", len(found), n, found)
		}
		l := found[n-1]
		m := l.ContextMap()
		if l.Level != zap.WarnLevel || m["actor"] != "overrunAction" || fmt.Sprint(m["key"]) != "[doc4]" || m["action"] != action || m["timeout"] != timeout || m["caller_gave_up"] != gaveUp {
			t.Fatalf("overrun logged at %v with %v; want WARN naming overrunAction [doc4], action %s, timeout %v, caller_gave_up %v", l.Level, m, action, timeout, gaveUp)
		}
		if late, _ := m["past_timeout"].(time.Duration); late < overrun/2 || late > time.Minute {
			t.Fatalf("past_timeout %v, want about %v", m["past_timeout"], overrun)
		}
	}
	get := func(want string) {
		t.Helper()
		if res, err := callWith(ctx(t), "get"); err != nil || string(res) != want {
			t.Fatalf("get: %s, %v; want %s", res, err, want)
		}
	}

	// A change, its caller waiting: committed, the caller told it timed out.
	if res, err := callWith(ctx(t), "report"); !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("report: %s, %v; want ErrTimeout", res, err)
	}
	check(1, "report", false)
	get("1")

	// No change: its result.
	if res, err := callWith(ctx(t), "peek"); err != nil || string(res) != "1" {
		t.Fatalf("peek: %s, %v; want 1", res, err)
	}
	check(2, "peek", false)

	// A caller whose deadline ends first: a deadline error, the change
	// committed all the same, and a warning that says the caller gave up.
	short, cancel := context.WithTimeout(ctx(t), timeout/4)
	defer cancel()
	if _, err := callWith(short, "report"); !errors.Is(err, rivet.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("report with a short deadline: %v, want a deadline error", err)
	}
	check(3, "report", true)
	get("2")

	// An action that heeds its context: no warning.
	if _, err := callWith(ctx(t), "polite"); !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("polite: %v, want ErrTimeout", err)
	}
	if found := overruns(); len(found) != 3 {
		t.Fatalf("%d overrun lines after the polite action, want still 3: %+v", len(found), found)
	}
}
