package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/runtime"
)

type callResult struct {
	out string
	err error
}

func callStr(t *testing.T, h *runtime.Host, name, key, action string, args ...any) callResult {
	raw, err := call(t, h, name, key, action, true, args...)
	var out string
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	return callResult{out, err}
}

// checkDeadlock checks that err is the deadlock error naming cycle.
func checkDeadlock(t *testing.T, err error, cycle string) {
	t.Helper()
	var rerr *rivet.Error
	if !errors.As(err, &rerr) || !errors.Is(err, rivet.ErrFailedPrecondition) || rerr.Group != "actor" || rerr.Code != "deadlock" {
		t.Fatalf("err = %v, want FAILED_PRECONDITION actor.deadlock", err)
	}
	if !strings.Contains(err.Error(), "("+cycle+")") {
		t.Fatalf("err = %v, want it to name the cycle %s", err, cycle)
	}
}

// Two callers whose turns each call the other's actor (A's turn calls B
// while B's turn, of another call chain, calls A) wait for each other:
// neither call re-enters, as neither came from the turn inside. The wait
// that closes the cycle fails at once, naming the actors, and the other
// call then goes on. Both used to wait until their deadline (a minute by
// default), and the one that gave up said only "deadline exceeded".
func TestCallsOfTwoChainsThatWaitForEachOtherFailAtOnce(t *testing.T) {
	t.Parallel()
	entered := make(chan string, 2)
	release := make(chan struct{})
	knot := rivet.Actor[testactors.HubState]{
		Name: "knot",
		Actions: rivet.Actions[testactors.HubState]{
			"hold": rivet.Action(func(c *rivet.ActionCtx[testactors.HubState], other string) (string, error) {
				entered <- c.Key()[0]
				select {
				case <-release:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				return rivet.Call[string](c.Context(), c.Client().GetOrCreate("knot", other), "noop")
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				return "noop " + c.Key()[0], nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, knot), func(c *runtime.Config) { c.ActionTimeout = time.Minute })
	for _, k := range []string{"a", "b"} {
		if r := callStr(t, e.host, "knot", k, "noop"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	done := make(chan callResult, 2)
	go func() { done <- callStr(t, e.host, "knot", "a", "hold", "b") }()
	go func() { done <- callStr(t, e.host, "knot", "b", "hold", "a") }()
	deadline := time.After(15 * time.Second)
	for range 2 {
		select {
		case <-entered:
		case <-deadline:
			t.Fatal("the two holds did not both enter their actors")
		}
	}
	close(release)
	var results []callResult
	for range 2 {
		select {
		case r := <-done:
			results = append(results, r)
		case <-deadline:
			t.Fatalf("the calls still wait for each other (%d of 2 answered: %v)", len(results), results)
		}
	}
	failed, ok := results[0], results[1]
	if failed.err == nil {
		failed, ok = ok, failed
	}
	if ok.err != nil || (ok.out != "noop a" && ok.out != "noop b") {
		t.Fatalf("results %v: want one call to fail and the other to go on", results)
	}
	// The failed call is the one whose callee the other answered.
	if ok.out == "noop a" {
		checkDeadlock(t, failed.err, `knot ["a"] -> knot ["b"] -> knot ["a"]`)
	} else {
		checkDeadlock(t, failed.err, `knot ["b"] -> knot ["a"] -> knot ["b"]`)
	}
}

// Two calls one turn makes at once take turns in an actor the other
// holds (TestSiblingReentrantCallsTakeTurns): A's turn calls B and C at
// once; B calls back into A, whose re-entrant turn calls C, held by the
// other call's turn, which calls A. Each waits for the other; the wait
// that closes the cycle fails at once rather than at the chain's deadline.
func TestSiblingCallsThatWaitForEachOtherFailAtOnce(t *testing.T) {
	t.Parallel()
	heldC := make(chan struct{})
	releaseC := make(chan struct{})
	type fanOut struct {
		ViaB  string `json:"viaB"`
		ErrB  string `json:"errB"`
		FromC string `json:"fromC"`
		ErrC  string `json:"errC"`
	}
	str := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	var lastErr struct {
		sync.Mutex
		c error
	}
	sa := rivet.Actor[testactors.HubState]{
		Name: "sa",
		Actions: rivet.Actions[testactors.HubState]{
			"fan": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (fanOut, error) {
				var out fanOut
				var wg sync.WaitGroup
				wg.Go(func() {
					var err error
					out.FromC, err = rivet.Call[string](c.Context(), c.Client().GetOrCreate("sc", "c"), "hold")
					lastErr.Lock()
					lastErr.c = err
					lastErr.Unlock()
					out.ErrC = str(err)
				})
				select {
				case <-heldC:
				case <-c.Context().Done():
					return out, c.Context().Err()
				}
				wg.Go(func() {
					var err error
					out.ViaB, err = rivet.Call[string](c.Context(), c.Client().GetOrCreate("sb", "b"), "back")
					out.ErrB = str(err)
				})
				wg.Wait()
				return out, nil
			}),
			"viaC": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				return rivet.Call[string](c.Context(), c.Client().GetOrCreate("sc", "c"), "noop")
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) { return "noop a", nil }),
		},
	}
	sb := rivet.Actor[testactors.HubState]{
		Name: "sb",
		Actions: rivet.Actions[testactors.HubState]{
			"back": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				return rivet.Call[string](c.Context(), c.Client().GetOrCreate("sa", "a"), "viaC")
			}),
		},
	}
	sc := rivet.Actor[testactors.HubState]{
		Name: "sc",
		Actions: rivet.Actions[testactors.HubState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				close(heldC)
				select {
				case <-releaseC:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				return rivet.Call[string](c.Context(), c.Client().GetOrCreate("sa", "a"), "noop")
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) { return "noop c", nil }),
		},
	}
	e := newEnv(t, counterReg(t, sa, sb, sc), func(c *runtime.Config) { c.ActionTimeout = time.Minute })
	if r := callStr(t, e.host, "sc", "c", "noop"); r.err != nil {
		t.Fatal(r.err)
	}
	done := make(chan error, 1)
	var out fanOut
	go func() {
		raw, err := call(t, e.host, "sa", "a", "fan", true)
		if err == nil {
			err = json.Unmarshal(raw, &out)
		}
		done <- err
	}()
	// A's re-entrant turn (from B) waits for C, which the other call holds.
	deadline := time.Now().Add(15 * time.Second)
	for e.host.GateWaiters(runtime.Ref{Name: "sc", Key: []string{"c"}}) != 1 {
		select {
		case err := <-done:
			t.Fatalf("fan ended early: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("A's re-entrant turn never waited for C")
		}
	}
	close(releaseC) // C's turn now calls A
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the sibling calls still wait for each other")
	}
	if out.ErrB != "" || out.ViaB != "noop c" {
		t.Fatalf("fan = %+v: want the call through B to go on once C's turn failed", out)
	}
	lastErr.Lock()
	defer lastErr.Unlock()
	checkDeadlock(t, lastErr.c, `sc ["c"] -> sa ["a"] -> sc ["c"]`)
}

// A call that runs out of time waiting for an actor's turn, which a call
// of another chain holds, says so, naming the actor: it said only
// "deadline exceeded", as if its own action had been slow.
func TestAWaitForAnotherCallsTurnSaysSoAtItsDeadline(t *testing.T) {
	t.Parallel()
	e, release := heldSlowpoke(t, func(c *runtime.Config) { c.ActionTimeout = 300 * time.Millisecond })
	r := callStr(t, e.host, "slowpoke", "s", "noop")
	release()
	if !errors.Is(r.err, rivet.ErrTimeout) || !strings.Contains(r.err.Error(), `waited until the deadline for the turn of slowpoke ["s"]`) {
		t.Fatalf("noop = %v, want its deadline, naming the actor whose turn it waited for", r.err)
	}
}

// A cycle through a turn under the innermost one of an actor fails at
// once too: A's turn calls B, whose turn calls back into A (re-entrant,
// inside A's turn) and, while that call runs, into C, whose turn (of
// another chain) waits for A. C's turn waits for A's outer turn, which
// waits for B's, which waits for C: the search looked only at A's
// innermost turn (B's call back, which ends), found nothing, and every
// call of the cycle waited until its deadline.
func TestACycleThroughAnOuterTurnFailsAtOnce(t *testing.T) {
	t.Parallel()
	var (
		heldC, releaseC = make(chan struct{}), make(chan struct{})
		inA, releaseInA = make(chan struct{}), make(chan struct{})
		callC           = make(chan struct{})
		errC            = make(chan error, 1)
		releaseOnce     sync.Once
		releaseInner    = func() { releaseOnce.Do(func() { close(releaseInA) }) }
		str             = func(c *rivet.ActionCtx[testactors.HubState], name, key, action string) (string, error) {
			return rivet.Call[string](c.Context(), c.Client().GetOrCreate(name, key), action)
		}
	)
	defer releaseInner()
	oa := rivet.Actor[testactors.HubState]{
		Name: "oa",
		Actions: rivet.Actions[testactors.HubState]{
			"start": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				return str(c, "ob", "b", "work")
			}),
			"inner": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				close(inA)
				select {
				case <-releaseInA:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				return "inner a", nil
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) { return "noop a", nil }),
		},
	}
	ob := rivet.Actor[testactors.HubState]{
		Name: "ob",
		Actions: rivet.Actions[testactors.HubState]{
			"work": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				var wg sync.WaitGroup
				var inner string
				var innerErr error
				wg.Go(func() { inner, innerErr = str(c, "oa", "a", "inner") })
				defer wg.Wait()
				select {
				case <-inA:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				select {
				case <-callC:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				_, err := str(c, "oc", "c", "noop")
				errC <- err
				wg.Wait()
				return inner, innerErr
			}),
		},
	}
	oc := rivet.Actor[testactors.HubState]{
		Name: "oc",
		Actions: rivet.Actions[testactors.HubState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				close(heldC)
				select {
				case <-releaseC:
				case <-c.Context().Done():
					return "", c.Context().Err()
				}
				return str(c, "oa", "a", "noop")
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) { return "noop c", nil }),
		},
	}
	e := newEnv(t, counterReg(t, oa, ob, oc), func(c *runtime.Config) { c.ActionTimeout = 20 * time.Second })
	for _, name := range []string{"oa", "oc"} {
		if r := callStr(t, e.host, name, name[1:], "noop"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	deadline := time.After(15 * time.Second)
	held := make(chan callResult, 1)
	go func() { held <- callStr(t, e.host, "oc", "c", "hold") }()
	select {
	case <-heldC:
	case <-deadline:
		t.Fatal("C's turn did not begin")
	}
	started := make(chan callResult, 1)
	go func() { started <- callStr(t, e.host, "oa", "a", "start") }()
	select {
	case <-inA:
	case <-deadline:
		t.Fatal("B's call back into A did not enter")
	}
	close(releaseC) // C's turn calls A: it waits for A's two turns
	for e.host.GateWaiters(runtime.Ref{Name: "oa", Key: []string{"a"}}) != 1 {
		select {
		case <-deadline:
			t.Fatal("C's call to A never waited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(callC) // B's turn calls C, closing the cycle
	select {
	case err := <-errC:
		checkDeadlock(t, err, `oa ["a"] -> oc ["c"] -> oa ["a"]`)
	case <-deadline:
		t.Fatal("B's call to C still waits: the cycle through A's outer turn was not found")
	}
	releaseInner()
	for _, ch := range []chan callResult{started, held} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("once the cycle broke: %v", r.err)
			}
		case <-deadline:
			t.Fatal("the calls did not end once the cycle broke")
		}
	}
}

// A call with 50 ms left that finds its actor busy waits for the turn for
// half of that before it is told it did not run (actor.busy): the margin
// for its answer (answerby.By, 50 ms at least) left it no wait at all, so
// that it was refused at once, where it waited for a turn of a
// millisecond before.
func TestAShortCallWaitsForABusyActorsTurnBeforeItIsRefused(t *testing.T) {
	t.Parallel()
	e, release := heldSlowpoke(t, nil)
	defer release()
	for i := range 3 {
		cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		_, err := e.host.Call(cctx, runtime.CallRequest{Ref: runtime.Ref{Name: "slowpoke", Key: []string{"s"}}, Action: "noop"})
		took := time.Since(start)
		cancel()
		var re *rivet.Error
		if !errors.Is(err, rivet.ErrTimeout) || !errors.As(err, &re) || re.Code != "busy" || rivet.OutcomeUnknown(err) {
			t.Fatalf("call %d: %v; want actor.busy, its outcome known", i, err)
		}
		if took < 20*time.Millisecond {
			t.Fatalf("call %d with 50 ms left was refused after %v; want it to wait about half of it (25 ms) for the turn", i, took)
		}
	}
}

// heldSlowpoke is a host of env mutate whose actor slowpoke ["s"] is in a
// turn (its action hold) until release, which also waits for that call to
// end; its action noop returns at once, once it has the turn.
func heldSlowpoke(t *testing.T, mutate func(*runtime.Config)) (*env, func()) {
	t.Helper()
	entered := make(chan struct{})
	hold := make(chan struct{})
	slow := rivet.Actor[testactors.HubState]{
		Name: "slowpoke",
		Actions: rivet.Actions[testactors.HubState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				close(entered)
				<-hold // whatever its context says
				return "held", nil
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) { return "noop", nil }),
		},
	}
	e := newEnv(t, counterReg(t, slow), mutate)
	done := make(chan callResult, 1)
	go func() { done <- callStr(t, e.host, "slowpoke", "s", "hold") }()
	release := func() { close(hold); <-done }
	select {
	case <-entered:
	case <-time.After(15 * time.Second):
		release()
		t.Fatal("hold did not enter")
	}
	return e, release
}
