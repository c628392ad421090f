package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type tillState struct {
	Total int `json:"total"`
	Runs  int `json:"runs"`
}

// till adds to its total; big answers a result too large to keep.
var till = rivet.Actor[tillState]{
	Name: "till",
	Actions: rivet.Actions[tillState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[tillState], n int) (int, error) {
			c.State.Total += n
			c.State.Runs++
			return c.State.Total, nil
		}),
		"big": rivet.Action0(func(c *rivet.ActionCtx[tillState]) (string, error) {
			c.State.Runs++
			return strings.Repeat("x", runtime.MaxKeptCallResult+1), nil
		}),
		"fail": rivet.Action0(func(c *rivet.ActionCtx[tillState]) (int, error) {
			c.State.Runs++
			return 0, rivet.UserError("nope", "it fails", nil)
		}),
		"nest": rivet.Action(func(c *rivet.ActionCtx[tillState], key string) (int, error) {
			return rivet.CallWith[int](c.Context(), c.Client().Get("till", c.Key()...), "add", rivet.CallOptions{IdempotencyKey: key}, 1)
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[tillState]) (tillState, error) { return *c.State, nil }),
	},
}

// A call with an idempotency key runs once: sent again (a retry whose first
// answer was lost, a step run again), it gets the first one's result, also
// after the actor was loaded again; with other arguments, the key is
// refused; a failed call records nothing; a result too large to keep is
// not kept, and the call sent again says it ran; the last callKeysKept
// keys are kept.
func TestACallWithAnIdempotencyKeyRunsOnce(t *testing.T) {
	defer runtime.SetCallKeysKept(runtime.SetCallKeysKept(3))
	e := newEnv(t, counterReg(t, till), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := runtime.Ref{Name: "till", Key: []string{"t"}}
	call := func(h *runtime.Host, key, action string, args ...int) (json.RawMessage, error) {
		t.Helper()
		raw, _ := json.Marshal(args)
		return h.Call(ctx, runtime.CallRequest{Ref: ref, Action: action, Args: raw, CreateIfMissing: true, IdempotencyKey: key})
	}
	state := func(h *runtime.Host) tillState {
		t.Helper()
		raw, err := h.Call(ctx, runtime.CallRequest{Ref: ref, Action: "get"})
		if err != nil {
			t.Fatal(err)
		}
		var st tillState
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	h := e.host
	for range 2 {
		if res, err := call(h, "charge-1", "add", 5); err != nil || string(res) != "5" {
			t.Fatalf("keyed add: %s, %v; want 5", res, err)
		}
	}
	if st := state(h); st.Total != 5 || st.Runs != 1 {
		t.Fatalf("after a keyed call sent twice: %+v; want it run once", st)
	}
	if _, err := call(h, "charge-1", "add", 6); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "used for another call") {
		t.Fatalf("the key with other arguments: %v; want ErrInvalidArgument", err)
	}
	for range 2 {
		if _, err := call(h, "f", "fail"); !errors.Is(err, rivet.ErrUser) {
			t.Fatalf("keyed failing call: %v", err)
		}
	}
	if st := state(h); st.Runs != 1 {
		t.Fatalf("runs %d: a failed call's change was kept", st.Runs)
	}

	e.restart() // what storage holds
	h = e.host
	if res, err := call(h, "charge-1", "add", 5); err != nil || string(res) != "5" {
		t.Fatalf("keyed add after a restart: %s, %v; want its kept result 5", res, err)
	}
	if res, err := call(h, "big-1", "big"); err != nil || len(res) < runtime.MaxKeptCallResult {
		t.Fatalf("keyed big: %d bytes, %v", len(res), err)
	}
	if _, err := call(h, "big-1", "big"); !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "ran already") {
		t.Fatalf("keyed big sent again: %v; want ErrFailedPrecondition, it ran", err)
	}
	for i := range 3 {
		if _, err := call(h, fmt.Sprint("more-", i), "add", 1); err != nil {
			t.Fatal(err)
		}
	}
	// The last 3 only: big-1 and charge-1 are pushed out.
	if _, err := call(h, "big-1", "big"); err != nil {
		t.Fatalf("big-1, pushed out by the 3 after it: %v; want it run again", err)
	}
	if res, err := call(h, "charge-1", "add", 5); err != nil || string(res) != "13" {
		t.Fatalf("charge-1, pushed out by the 3 after it: %s, %v; want it run again (13)", res, err)
	}
	if st := state(h); st.Total != 13 || st.Runs != 7 {
		t.Fatalf("in the end %+v; want total 13 in 7 runs", st)
	}
	// Each key pushed out within its 24 hours is counted (a metric), as
	// a repeat of it would run again: charge-1, big-1, more-0, more-1.
	if n := h.Stats().CallKeysEvicted; n != 4 {
		t.Fatalf("%d keys evicted within their window, want 4", n)
	}
	// A keyed call whose action calls its own actor with the same key:
	// the inner call is refused rather than run, and recorded, under the
	// outer one's key.
	raw, _ := json.Marshal([]string{"nested"})
	if _, err := h.Call(ctx, runtime.CallRequest{Ref: ref, Action: "nest", Args: raw, IdempotencyKey: "nested"}); !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "re-enters") {
		t.Fatalf("a keyed call re-entered with its own key: %v; want ErrFailedPrecondition", err)
	}
	if st := state(h); st.Total != 13 {
		t.Fatalf("total %d after the refused re-entry, want 13", st.Total)
	}
}
