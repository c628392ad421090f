package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// An action of X is in progress when the handoff of X's partition begins;
// it calls Y (another partition), whose action calls Z, another actor of
// X's partition. The handoff waits for X's turn, which waits for Z: Z is
// served on the partition's claim (loaded if it is not in memory), not
// refused (a forwarding node and the client would retry it until they gave
// up, and the client's call would fail with its outcome unknown), and the
// handoff then hands Z off too.
func TestAChainTheHandoffWaitsForIsLetIn(t *testing.T) {
	for _, zLoaded := range []bool{false, true} {
		t.Run(fmt.Sprintf("zLoaded=%v", zLoaded), func(t *testing.T) {
			testChainLetIn(t, zLoaded)
		})
	}
}

func testChainLetIn(t *testing.T, zLoaded bool) {
	remote := &countingRemote{}
	withRemote(t, remote)
	entered, hold := make(chan struct{}), make(chan struct{})
	var zRuns atomic.Int32
	var zKey string // set before any call
	x := rivet.Actor[taskState]{
		Name: "chainX",
		Actions: rivet.Actions[taskState]{
			"relay": rivet.Action(func(c *rivet.ActionCtx[taskState], yKey string) (int, error) {
				close(entered)
				<-hold
				raw, err := c.Client().GetOrCreate("chainY", yKey).Call(c.Context(), "bounce", zKey)
				if err != nil {
					return 0, err
				}
				var n int
				return n, json.Unmarshal(raw, &n)
			}),
		},
	}
	y := rivet.Actor[taskState]{
		Name: "chainY",
		Actions: rivet.Actions[taskState]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[taskState], key string) (int, error) {
				raw, err := c.Client().GetOrCreate("chainZ", key).Call(c.Context(), "incr")
				if err != nil {
					return 0, err
				}
				var n int
				return n, json.Unmarshal(raw, &n)
			}),
		},
	}
	// Z's workflow notes a step run while Z's partition is releasing.
	var releasing func() bool // set before any call
	var stepsReleasing atomic.Int32
	z := rivet.Actor[taskState]{
		Name: "chainZ",
		Run: func(c *workflow.Ctx[taskState]) error {
			if err := c.Step("note", func(*workflow.StepCtx[taskState]) error {
				if releasing() {
					stepsReleasing.Add(1)
				}
				return nil
			}); err != nil {
				return err
			}
			return c.Sleep("nap", time.Hour)
		},
		Actions: rivet.Actions[taskState]{
			"incr": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				zRuns.Add(1)
				c.State.Count++
				return c.State.Count, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) { return c.State.Count, nil }),
		},
	}
	e := newEnv(t, counterReg(t, x, y, z), nil)
	part := placement.Partition("chainX", storage.EncodeKey([]string{"x"}), testPartitions)
	releasing = func() bool { _, ok := e.own.Releasing(part); return ok }
	yKey := ""
	for i := 0; yKey == ""; i++ {
		if k := fmt.Sprint("y", i); placement.Partition("chainY", storage.EncodeKey([]string{k}), testPartitions) != part {
			yKey = k
		}
	}
	for i := 0; zKey == ""; i++ {
		if k := fmt.Sprint("z", i); placement.Partition("chainZ", storage.EncodeKey([]string{k}), testPartitions) == part {
			zKey = k
		}
	}
	want := 1
	if zLoaded {
		if _, err := call(t, e.host, "chainZ", zKey, "incr", true); err != nil {
			t.Fatal(err)
		}
		// Its workflow's first run ends (its step recorded, then its
		// sleep) before the handoff begins: a body that began before the
		// leave is in flight and may end on the releasing claim, which is
		// not what this asks (its first body waits for its attempt
		// marker's commit, a window a loaded machine widens).
		waitFor(t, "Z's workflow to sleep", 20*time.Second, func() bool {
			return inspect(t, e.host, "chainZ", zKey).WorkflowStatus == runtime.WorkflowSleeping
		})
		want = 2
	}
	zRuns.Store(0)

	relayed := make(chan error, 1)
	go func() { _, err := call(t, e.host, "chainX", "x", "relay", true, yKey); relayed <- err }()
	select {
	case <-entered:
	case err := <-relayed:
		t.Fatalf("relay ended before it began: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not begin")
	}
	handedOff := make(chan error, 1)
	go func() { handedOff <- e.host.Handoff(context.Background(), part) }()
	waitFor(t, "the partition to be releasing", 10*time.Second, func() bool { _, ok := e.own.Releasing(part); return ok })
	close(hold)

	select {
	case err := <-relayed:
		if err != nil {
			t.Fatalf("the client's call to X, whose chain calls Z of X's partition during its handoff: %v, want it served", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client's call to X did not end")
	}
	select {
	case err := <-handedOff:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handoff did not end")
	}
	if n := zRuns.Load(); n != 1 {
		t.Fatalf("Z's action ran %d times, want 1", n)
	}
	// Loaded on the releasing claim for the call alone, Z left its
	// workflow to the next owner: a step started there was cancelled by
	// the handoff and ran again on the next owner.
	if n := stepsReleasing.Load(); n != 0 {
		t.Fatalf("Z's workflow ran %d steps on the releasing claim", n)
	}
	if n := remote.calls.Load(); n != 0 {
		t.Fatalf("%d calls were sent to other nodes, want the chain served here", n)
	}
	for _, k := range [][2]string{{"chainX", "x"}, {"chainZ", zKey}} {
		if w := e.host.GateWaiters(runtime.Ref{Name: k[0], Key: []string{k[1]}}); w != -1 {
			t.Fatalf("%s is still in memory after the handoff", k[0])
		}
	}
	// Z's write landed, on the claim: the next owner reads it.
	h2, own2 := secondHost(t, e)
	if _, err := own2.Claim(ctx(t), []uint32{part}); err != nil {
		t.Fatal(err)
	}
	raw, err := call(t, h2, "chainZ", zKey, "get", false)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != fmt.Sprint(want) {
		t.Fatalf("Z's count on the next owner is %s, want %d", raw, want)
	}
}
