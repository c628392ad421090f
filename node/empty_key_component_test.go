package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node/nodetest"
)

// An empty key component is a key like any other (rivet.ValidateKey): [""],
// ["", ""], ["a", ""], ["", "a"], ["a"] and the others below are actors of
// their own, each with its own state and scheduled calls, after a restart
// too (a node reads the keys of its wakeups and schedules back from
// storage), and List gives each its own key. So it is allowed, not refused: nothing in the layout
// confuses it with another key (storage.FuzzEncodeKey).
func TestEmptyKeyComponentsAreDistinctActors(t *testing.T) {
	type st struct{ N, Fired int }
	tick := rivet.Actor[st]{
		Name: "tick",
		Actions: rivet.Actions[st]{
			"add": rivet.Action(func(c *rivet.ActionCtx[st], by int) (int, error) {
				c.State.N += by
				_, err := c.Schedule().After(2*time.Second, "fire") // after the restart, on a loaded machine too
				return c.State.N, err
			}),
			"fire": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.Fired++; return c.State.Fired, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[st]) ([2]int, error) { return [2]int{c.State.N, c.State.Fired}, nil }),
		},
	}
	keys := [][]string{{""}, {"", ""}, {"a", ""}, {"", "a"}, {"a"}, {","}, {"", "", ""}}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, stop := nodetest.Start(t, dir, tick)
	for i, k := range keys {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("tick", k...), "add", i+1); err != nil {
			t.Fatalf("add to %q: %v", k, err)
		}
	}
	// Stopped before the scheduled calls are due: the restarted node finds
	// them in storage, by their actors' keys.
	stop()
	c, _ = nodetest.Start(t, dir, tick)
	for i, k := range keys {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			v, err := rivet.Call[[2]int](ctx, c.Get("tick", k...), "get")
			if err != nil {
				t.Fatalf("get %q: %v", k, err)
			}
			if v[0] != i+1 {
				t.Fatalf("%q holds %d, want %d: its own state", k, v[0], i+1)
			}
			if v[1] == 1 {
				break
			}
			if v[1] > 1 || time.Now().After(deadline) {
				t.Fatalf("%q's scheduled call ran %d times, want once", k, v[1])
			}
		}
	}
	all, err := c.ListAll(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	var listed [][]string
	for _, a := range all {
		listed = append(listed, a.Key)
	}
	for _, k := range keys {
		if !slices.ContainsFunc(listed, func(l []string) bool { return slices.Equal(l, k) }) {
			t.Errorf("List: %q missing from %q", k, listed)
		}
	}
	if len(listed) != len(keys) {
		t.Errorf("List: %d actors %q, want %d", len(listed), listed, len(keys))
	}
}
