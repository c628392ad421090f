package workflow_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

func note(c *logCtx, name string) error {
	return c.Step(name, func(s *logStep) error { s.State.Log = append(s.State.Log, name); return nil })
}

func wait(c *logCtx, name string) error {
	_, err := workflow.Next[job](c, name)
	return err
}

// inFlight runs v1 until it blocks on a message nobody sent (or ends): the
// history of a workflow in flight when new code is deployed.
func inFlight(t *testing.T, v1 func(c *logCtx) error) *workflowtest.Host[log] {
	t.Helper()
	h := newHost(log{})
	if out := drive(t, h, v1); out.Status == workflow.RunFailed {
		t.Fatalf("v1: %+v", out)
	}
	return h
}

func TestDivergence(t *testing.T) {
	seq := func(names ...string) func(c *logCtx) error {
		return func(c *logCtx) error {
			for _, n := range names {
				var err error
				if strings.HasPrefix(n, "?") {
					err = wait(c, n[1:])
				} else {
					err = note(c, n)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	cases := []struct {
		name     string
		v1, v2   func(c *logCtx) error
		path     string
		expected string
		found    string
	}{
		{"renamed root step", seq("a", "b", "?w"), seq("a", "c", "?w"), "b", `step "b"`, `new step "c"`},
		{"removed root step", seq("a", "b", "?w"), seq("a", "?w"), "b", `step "b"`, `new message "w"`},
		{"removed last root step", seq("a", "b"), seq("a"), "b", `step "b"`, "the workflow ended"},
		{"removed step at the end of a loop iteration", loopOf("a", "b"), loopOf("a"), "l/~0/b", `step "l/~0/b"`, `"l/~0" ended`},
		{"inserted root step", seq("a", "b", "?w"), seq("a", "x", "b", "?w"), "b", `step "b"`, `new step "x"`},
		{"swapped root steps", seq("a", "b", "?w"), seq("b", "a", "?w"), "a", `step "a" before step "b"`, `"b" first`},
		// The entry named is the one the code missed, the next one
		// recorded, whichever name sorts first.
		{"renamed root step, names out of path order", seq("z", "m", "b", "?w"), seq("z", "c", "b", "?w"), "m", `step "m"`, `new step "c"`},
		{"inserted root step, names out of path order", seq("z", "m", "b", "?w"), seq("z", "x", "m", "b", "?w"), "m", `step "m"`, `new step "x"`},
		{"removed last root step, names out of path order", seq("z", "m", "b"), seq("z", "m"), "b", `step "b"`, "the workflow ended"},
		{"renamed in a loop iteration, names out of path order", loopOf("z", "m", "b"), loopOf("z", "c", "b"), "l/~0/m", `step "l/~0/m"`, `new step "l/~0/c"`},
		{"inserted before a try block, names out of path order", func(c *logCtx) error {
			if err := note(c, "z"); err != nil {
				return err
			}
			if _, err := c.Try("t", func(c *logCtx) error { return note(c, "y") }); err != nil {
				return err
			}
			return seq("b", "?w")(c)
		}, seq("z", "x", "b", "?w"), "t/y", `step "t/y"`, `new step "x"`},
		{"swapped in a join branch", func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": func(c *logCtx) (int, error) { return 0, seq("a", "b", "?w")(c) }})
			return err
		}, func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": func(c *logCtx) (int, error) { return 0, seq("b", "a", "?w")(c) }})
			return err
		}, "j/x/a", `step "j/x/a" before step "j/x/b"`, `"j/x/b" first`},
		{"wrong kind", seq("a", "?w"), func(c *logCtx) error { return c.Sleep("a", 0) }, "a", `step "a"`, "sleep"},
		{"renamed in a loop iteration", func(c *logCtx) error {
			return c.Loop("l", func(c *logCtx) error { return seq("a", "b", "?w")(c) })
		}, func(c *logCtx) error {
			return c.Loop("l", func(c *logCtx) error { return seq("a", "c", "?w")(c) })
		}, "l/~0/b", `step "l/~0/b"`, `new step "l/~0/c"`},
		{"try block where a step was", seq("t", "?w"), func(c *logCtx) error {
			_, err := c.Try("t", func(*logCtx) error { return nil })
			return err
		}, "t", `step "t"`, "a try block"},
		{"step renamed inside try", func(c *logCtx) error {
			_, err := c.Try("t", func(c *logCtx) error { return seq("a", "?w")(c) })
			return err
		}, func(c *logCtx) error {
			_, err := c.Try("t", func(c *logCtx) error { return seq("b", "?w")(c) })
			return err
		}, "t/a", `step "t/a"`, `new step "t/b"`},
		// A try block has no entry: its steps stand in the order of the
		// scope that holds it.
		{"try block inserted before a root step", seq("a", "b", "?w"), func(c *logCtx) error {
			if err := seq("a")(c); err != nil {
				return err
			}
			if _, err := c.Try("t", func(c *logCtx) error { return seq("x")(c) }); err != nil {
				return err
			}
			return seq("b", "?w")(c)
		}, "b", `step "b"`, `new step "t/x"`},
		// A try block takes a place among the entries of the scope
		// that holds it: moved past entries recorded there, it diverges
		// as a step moved past them does.
		{"try block moved after a root step", tryAt(1, "a", "c", "?w"), tryAt(2, "a", "c", "?w"), "t", `try "t" before step "c"`, `"c" first`},
		{"try block moved before a root step", tryAt(1, "a", "c", "?w"), tryAt(0, "a", "c", "?w"), "a", `step "a" before try "t"`, `"t" first`},
		{"try block moved past the last step", tryAt(1, "a", "c"), tryAt(2, "a", "c"), "t", `try "t" before step "c"`, `"c" first`},
		{"try block moved in a loop iteration", func(c *logCtx) error {
			return c.Loop("l", func(c *logCtx) error { return tryAt(1, "a", "c", "?w")(c) })
		}, func(c *logCtx) error {
			return c.Loop("l", func(c *logCtx) error { return tryAt(2, "a", "c", "?w")(c) })
		}, "l/~0/t", `try "l/~0/t" before step "l/~0/c"`, `"l/~0/c" first`},
		{"try block moved in a join branch", func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": func(c *logCtx) (int, error) { return 0, tryAt(1, "a", "c", "?w")(c) }})
			return err
		}, func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": func(c *logCtx) (int, error) { return 0, tryAt(0, "a", "c", "?w")(c) }})
			return err
		}, "j/x/a", `step "j/x/a" before try "j/x/t"`, `"j/x/t" first`},
		{"try block moved in a try block", func(c *logCtx) error {
			_, err := c.Try("outer", func(c *logCtx) error { return tryAt(1, "a", "c", "?w")(c) })
			return err
		}, func(c *logCtx) error {
			_, err := c.Try("outer", func(c *logCtx) error { return tryAt(2, "a", "c", "?w")(c) })
			return err
		}, "outer/t", `try "outer/t" before step "outer/c"`, `"outer/c" first`},
		// A try block that holds only a try block.
		{"nested try block moved", func(c *logCtx) error {
			if _, err := c.Try("outer", func(c *logCtx) error { return tryAt(0)(c) }); err != nil {
				return err
			}
			return seq("c", "?w")(c)
		}, func(c *logCtx) error {
			if err := note(c, "c"); err != nil {
				return err
			}
			if _, err := c.Try("outer", func(c *logCtx) error { return tryAt(0)(c) }); err != nil {
				return err
			}
			return wait(c, "w")
		}, "outer", `try "outer" before step "c"`, `"c" first`},
		{"try block renamed", func(c *logCtx) error {
			_, err := c.Try("t", func(c *logCtx) error { return seq("a", "?w")(c) })
			return err
		}, func(c *logCtx) error {
			_, err := c.Try("t2", func(c *logCtx) error { return seq("a", "?w")(c) })
			return err
		}, "t/a", `step "t/a"`, `new step "t2/a"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := inFlight(t, tc.v1)
			before := h.State().Log
			out := drive(t, h, tc.v2)
			de := failedWith[*workflow.DivergenceError](t, out)
			if de.Path != tc.path || !strings.Contains(de.Expected, tc.expected) || !strings.Contains(de.Found, tc.found) {
				t.Fatalf("divergence %+v, want path %q expected ~%q found ~%q", de, tc.path, tc.expected, tc.found)
			}
			// What an operator reads names the path and the way out.
			if msg := de.Error(); !strings.Contains(msg, fmt.Sprintf("%q", tc.path)) || !strings.Contains(msg, "Ctx.GetVersion") || !strings.Contains(msg, "Ctx.Removed") {
				t.Fatalf("the error says %q: want the path and the gates that make a change replay", msg)
			}
			// Caught before the new code ran a step.
			if got := h.State().Log; !reflect.DeepEqual(got, before) {
				t.Fatalf("steps ran before the divergence was caught: %v -> %v", before, got)
			}
		})
	}
}

// tryAt runs steps (a name starting with '?' is a receive), with a try
// block "t" holding step "b" before the one at index at (at the end if
// at is len(steps)).
func tryAt(at int, steps ...string) func(c *logCtx) error {
	return func(c *logCtx) error {
		for i := 0; i <= len(steps); i++ {
			if i == at {
				if _, err := c.Try("t", func(c *logCtx) error { return note(c, "b") }); err != nil {
					return err
				}
			}
			if i == len(steps) {
				break
			}
			var err error
			if n := steps[i]; strings.HasPrefix(n, "?") {
				err = wait(c, n[1:])
			} else {
				err = note(c, n)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// loopOf runs steps in the first iteration of a loop, then waits in the
// second.
func loopOf(steps ...string) func(c *logCtx) error {
	return func(c *logCtx) error {
		_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l"}, func(c *logCtx, i int) (int, error) {
			if i == 1 {
				if err := wait(c, "w"); err != nil {
					return i, err
				}
				return i, workflow.Break
			}
			for _, n := range steps {
				if err := note(c, n); err != nil {
					return i, err
				}
			}
			return i + 1, nil
		})
		return err
	}
}

func TestReplayAcceptsAppendedEntries(t *testing.T) {
	// New entries after all the recorded ones are just new.
	h := inFlight(t, func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if err := note(c, "b"); err != nil {
			return err
		}
		return wait(c, "w")
	})
	h.Send("q", job{1})
	out := drive(t, h, func(c *logCtx) error {
		for _, n := range []string{"a", "b"} {
			if err := note(c, n); err != nil {
				return err
			}
		}
		if err := wait(c, "w"); err != nil {
			return err
		}
		return note(c, "c")
	})
	if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b", "c"}) {
		t.Fatalf("outcome %+v log %v", out, h.State().Log)
	}
}

func TestGetVersion(t *testing.T) {
	v1 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if err := note(c, "b"); err != nil {
			return err
		}
		return wait(c, "w")
	}
	var versions []int
	v2 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		v, err := c.GetVersion("drop-b", 2)
		if err != nil {
			return err
		}
		versions = append(versions, v)
		if v == 1 {
			if err := note(c, "b"); err != nil {
				return err
			}
		} else if err := note(c, "b2"); err != nil {
			return err
		}
		return wait(c, "w")
	}
	// An instance in flight keeps the old path.
	h := inFlight(t, v1)
	h.Send("q", job{1})
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b"}) {
		t.Fatalf("old instance: %+v %v", out, h.State().Log)
	}
	// A new instance takes the new one.
	h2 := newHost(log{})
	h2.Send("q", job{1})
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h2.State().Log, []string{"a", "b2"}) {
		t.Fatalf("new instance: %+v %v", out, h2.State().Log)
	}
	// Recorded versions are replayed.
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("replay %+v", out)
	}
	if !reflect.DeepEqual(versions, []int{1, 2, 2}) {
		t.Fatalf("versions %v", versions)
	}
	if e := entryAt(t, h2.History(), "drop-b"); e.Kind != workflow.KindVersionCheck || e.Version != 2 || e.Latest != 2 {
		t.Fatalf("entry %+v", e)
	}
}

// Changes deployed at once, each behind its own gate, and a step retired
// with Removed that this instance never ran, all before an entry a
// workflow in flight recorded: it takes the old path, and goes on doing so
// on every later replay. The second of them used to be recorded with a
// place after the recorded step, so the next replay, reaching it first,
// failed the workflow with a divergence.
func TestGatesBeforeARecordedStepReplay(t *testing.T) {
	v1 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if err := note(c, "b"); err != nil {
			return err
		}
		return wait(c, "w")
	}
	var got []int
	v2 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		for _, g := range []string{"change-1", "change-2"} {
			v, err := c.GetVersion(g, 2)
			if err != nil {
				return err
			}
			got = append(got, v)
			if v == 2 {
				if err := note(c, "new-"+g); err != nil {
					return err
				}
			}
		}
		if err := c.Removed("legacy", workflow.KindStep); err != nil {
			return err
		}
		if err := note(c, "b"); err != nil {
			return err
		}
		if err := wait(c, "w"); err != nil {
			return err
		}
		return wait(c, "w2")
	}
	h := inFlight(t, v1)
	h.Send("q", job{1})
	if out := drive(t, h, v2); out.Status != workflow.RunYielded {
		t.Fatalf("first run of v2: %+v", out)
	}
	// The next activation replays what v2 recorded.
	h.Send("q", job{2})
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b"}) || !reflect.DeepEqual(got, []int{1, 1, 1, 1}) {
		t.Fatalf("replay of v2: %+v log %v versions %v", out, h.State().Log, got)
	}
}

// A try block's entries record its place in the scope that holds it;
// those recorded by a build before that do not. A workflow in flight with
// such a history replays under the code that recorded it, and the entries
// it then adds to the block record no place either (the block's is not
// known).
func TestTryBlocksRecordedWithoutAPlaceReplay(t *testing.T) {
	v1 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if _, err := c.Try("t", func(c *logCtx) error {
			if err := note(c, "b"); err != nil {
				return err
			}
			return wait(c, "w1")
		}); err != nil {
			return err
		}
		if err := note(c, "c"); err != nil {
			return err
		}
		return wait(c, "w2")
	}
	h := inFlight(t, v1)
	old := h.History()
	for i := range old {
		if old[i].Path == "t/b" && !reflect.DeepEqual(old[i].TryPlaces, []int{2}) {
			t.Fatalf("entry %+v: want the block's place, 2", old[i])
		}
		old[i].TryPlaces = nil
	}
	h.SetHistory(old)
	h.Send("q", job{1})
	if out := drive(t, h, v1); out.Status != workflow.RunYielded {
		t.Fatalf("in flight: %+v", out)
	}
	if e := entryAt(t, h.History(), "t/w1"); e.TryPlaces != nil {
		t.Fatalf("entry %+v added to a block of unknown place records one", e)
	}
	h.Send("q", job{2})
	if out := drive(t, h, v1); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b", "c"}) {
		t.Fatalf("replay: %+v log %v", out, h.State().Log)
	}
}

// Gates and a retired step put before a try block that a workflow in
// flight recorded, and in it, take the old path on every replay: they
// share the block's place, not one after it.
func TestGatesBeforeARecordedTryBlockReplay(t *testing.T) {
	v1 := tryAt(1, "a", "c", "?w")
	var got []int
	gates := func(c *logCtx, names ...string) error {
		for _, g := range names {
			v, err := c.GetVersion(g, 2)
			if err != nil {
				return err
			}
			got = append(got, v)
		}
		return nil
	}
	v2 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if err := gates(c, "change-1", "change-2"); err != nil {
			return err
		}
		if err := c.Removed("legacy", workflow.KindStep); err != nil {
			return err
		}
		if _, err := c.Try("new", func(c *logCtx) error { return gates(c, "change-3") }); err != nil {
			return err
		}
		if _, err := c.Try("t", func(c *logCtx) error {
			if err := gates(c, "change-4", "change-5"); err != nil {
				return err
			}
			return note(c, "b")
		}); err != nil {
			return err
		}
		if err := note(c, "c"); err != nil {
			return err
		}
		if err := wait(c, "w"); err != nil {
			return err
		}
		return wait(c, "w2")
	}
	h := inFlight(t, v1)
	h.Send("q", job{1})
	if out := drive(t, h, v2); out.Status != workflow.RunYielded {
		t.Fatalf("first run of v2: %+v", out)
	}
	h.Send("q", job{2})
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b", "c"}) || !reflect.DeepEqual(got, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
		t.Fatalf("replay of v2: %+v log %v versions %v", out, h.State().Log, got)
	}
}

func TestRemoved(t *testing.T) {
	v1 := func(c *logCtx) error {
		if err := c.Loop("old-loop", func(c *logCtx) error {
			if err := note(c, "x"); err != nil {
				return err
			}
			return workflow.Break
		}); err != nil {
			return err
		}
		return wait(c, "w")
	}
	v2 := func(c *logCtx) error {
		if err := c.Removed("old-loop", workflow.KindLoop); err != nil {
			return err
		}
		return wait(c, "w")
	}
	h := inFlight(t, v1)
	h.Send("q", job{1})
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("in flight: %+v", out)
	}
	h2 := newHost(log{})
	h2.Send("q", job{1})
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("new: %+v", out)
	}
	if e := entryAt(t, h2.History(), "old-loop"); e.Kind != workflow.KindRemoved || e.RemovedKind != workflow.KindLoop {
		t.Fatalf("placeholder %+v", e)
	}
	// The placeholder replays, and the wrong kind diverges.
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("replay: %+v", out)
	}
	out := drive(t, h, func(c *logCtx) error { return c.Removed("old-loop", workflow.KindStep) })
	failedWith[*workflow.DivergenceError](t, out)
}

// A try block has no entry of its own, and the top level is validated: a
// block taken out of the code left its entries in the histories of
// workflows in flight, a divergence unless Removed can retire it.
func TestRemovedRetiresATryBlock(t *testing.T) {
	v1 := func(c *logCtx) error {
		if _, err := c.Try("old-block", func(c *logCtx) error { return note(c, "x") }); err != nil {
			return err
		}
		return wait(c, "w")
	}
	v2 := func(c *logCtx) error {
		if err := c.Removed("old-block", workflow.KindTry); err != nil {
			return err
		}
		return wait(c, "w")
	}
	h := inFlight(t, v1)
	h.Send("q", job{1})
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("in flight: %+v", out)
	}
	if out := drive(t, h, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("in flight, replayed: %+v", out)
	}
	h2 := newHost(log{})
	h2.Send("q", job{1})
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("new: %+v", out)
	}
	if e := entryAt(t, h2.History(), "old-block"); e.Kind != workflow.KindRemoved || e.RemovedKind != workflow.KindTry {
		t.Fatalf("placeholder %+v", e)
	}
	if out := drive(t, h2, v2); out.Status != workflow.RunCompleted {
		t.Fatalf("replay: %+v", out)
	}
	// Where a step was, it is a divergence.
	out := drive(t, newHostWith(t, v1Step), func(c *logCtx) error {
		if err := c.Removed("old-block", workflow.KindTry); err != nil {
			return err
		}
		return wait(c, "w")
	})
	failedWith[*workflow.DivergenceError](t, out)
}

func v1Step(c *logCtx) error {
	if err := note(c, "old-block"); err != nil {
		return err
	}
	return wait(c, "w")
}

func newHostWith(t *testing.T, v1 func(c *logCtx) error) *workflowtest.Host[log] {
	t.Helper()
	h := inFlight(t, v1)
	h.Send("q", job{1})
	return h
}

func TestRollback(t *testing.T) {
	compensated := func(name string) func(c *logCtx) (string, error) {
		return func(c *logCtx) (string, error) {
			return workflow.StepWithRollback(c, workflow.StepOptions{Name: name},
				func(s *logStep) (string, error) {
					s.State.Log = append(s.State.Log, name)
					return "id-" + name, nil
				},
				func(s *logStep, id string) error {
					s.State.Log = append(s.State.Log, "undo "+id)
					return nil
				})
		}
	}
	wf := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		for _, n := range []string{"reserve", "charge"} {
			if _, err := compensated(n)(c); err != nil {
				return err
			}
		}
		if err := c.Sleep("settle", time.Minute); err != nil {
			return err
		}
		if _, err := compensated("ship")(c); err != nil {
			return err
		}
		return c.StepWith(workflow.StepOptions{Name: "notify", MaxRetries: workflow.NoRetries}, func(*logStep) error {
			return errors.New("mail server down")
		})
	}
	want := []string{"reserve", "charge", "ship", "undo id-ship", "undo id-charge", "undo id-reserve"}
	h := newHost(log{})
	out := drive(t, h, wf)
	se := failedWith[*workflow.StepError](t, out)
	if se.Path != "notify" || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("error %v, log %v", se, h.State().Log)
	}
	for _, p := range []string{"reserve", "charge", "ship"} {
		if e := entryAt(t, h.History(), p); !e.RollbackDone {
			t.Fatalf("%s: rollback not recorded: %+v", p, e)
		}
	}
	// The failure is sticky and the rollback is not run twice.
	if out := drive(t, h, wf); out.Status != workflow.RunFailed || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("rerun: %+v %v", out, h.State().Log)
	}
	// A crash in the middle of the rollback resumes it where it stopped.
	for k := 1; k <= 8; k++ {
		h := newHost(log{})
		h.CrashAt(k, k%2 == 0)
		out := drive(t, h, wf)
		if out.Status != workflow.RunFailed || !reflect.DeepEqual(h.State().Log, want) {
			t.Fatalf("crash at %d: %+v %v", k, out, h.State().Log)
		}
	}
}

func TestRollbackHandlerFailure(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"}, func(*logStep) (int, error) { return 1, nil },
			func(*logStep, int) error { return errors.New("cannot undo") }); err != nil {
			return err
		}
		return errors.New("business failure")
	})
	rf := failedWith[*workflow.RollbackFailedError](t, out)
	if rf.Path != "a" || !strings.Contains(out.Err.Error(), "business failure") {
		t.Fatalf("error %v", out.Err)
	}
}

// TestNoRollbackAfterDivergence: a run whose code no longer matches its
// history fails as a divergence and runs no compensation, whether the new
// code does something else where the history holds an entry, or ends with
// an error of its own before reaching recorded entries (unchanged code,
// replaying the same results, fails where it failed then, with nothing
// recorded after that point).
func TestNoRollbackAfterDivergence(t *testing.T) {
	var undone atomic.Bool
	// v's run notes second after its compensated step; "" fails there.
	v := func(second string) func(c *logCtx) error {
		return func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"}, func(*logStep) (int, error) { return 1, nil },
				func(*logStep, int) error { undone.Store(true); return nil }); err != nil {
				return err
			}
			if second == "" {
				return errors.New("v2 rejects this order")
			}
			if err := note(c, second); err != nil {
				return err
			}
			return wait(c, "w")
		}
	}
	for _, second := range []string{"c", ""} {
		undone.Store(false)
		h := inFlight(t, v("b"))
		out := drive(t, h, v(second))
		if de := failedWith[*workflow.DivergenceError](t, out); second == "" && de.Path != "b" {
			t.Errorf("a run failing before b: divergence at %q, want b", de.Path)
		}
		if undone.Load() {
			t.Fatalf("rollback ran after a divergence (second step %q)", second)
		}
	}
}

func TestTryCatchesStepJoinRace(t *testing.T) {
	h := newHost(log{})
	var caught []*workflow.Failure
	out := drive(t, h, func(c *logCtx) error {
		fail := func(c *logCtx) (int, error) {
			return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
				return 0, errors.New("no")
			})
		}
		blocks := map[string]func(c *logCtx) error{
			"step": func(c *logCtx) error { _, err := fail(c); return err },
			"join": func(c *logCtx) error {
				_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": fail})
				return err
			},
			"race": func(c *logCtx) error {
				_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{{Name: "x", Run: fail}})
				return err
			},
		}
		for _, name := range []string{"step", "join", "race"} {
			f, err := c.Try("try-"+name, blocks[name])
			if err != nil {
				return err
			}
			caught = append(caught, f)
		}
		// What is not a step, join or race failure passes through.
		mine := errors.New("mine")
		if _, err := c.Try("own", func(*logCtx) error { return mine }); err != mine {
			return errors.New("Try caught a plain error")
		}
		return nil
	})
	if out.Status != workflow.RunCompleted || len(caught) != 3 {
		t.Fatalf("outcome %+v caught %v", out, caught)
	}
	for i, src := range []workflow.Source{workflow.SourceStep, workflow.SourceJoin, workflow.SourceRace} {
		if caught[i] == nil || caught[i].Source != src {
			t.Fatalf("caught[%d] = %+v", i, caught[i])
		}
	}
	if caught[0].Name != "try-step/s" || caught[0].Kind != workflow.FailureExhausted {
		t.Fatalf("step failure %+v", caught[0])
	}
}

// A Try block's catch list (rivet-semantics.md 1.3, the original's try
// `catch`): a kind not listed passes through; rollback, never caught by
// default, is caught when listed, from a step or from the block's own code.
func TestTryCatchList(t *testing.T) {
	h := newHost(log{})
	var (
		stepOnly, rollbackStep, rollbackBlock *workflow.Failure
		passed, uncaught, invalid             error
	)
	out := drive(t, h, func(c *logCtx) error {
		fail := func(c *logCtx) (int, error) {
			return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
				return 0, errors.New("no")
			})
		}
		var err error
		// Steps only: a join's failure passes through.
		stepOnly, passed = c.TryOpts(workflow.TryOptions{Name: "steps", Catch: []workflow.TryCatch{workflow.CatchStep}}, func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{"x": fail})
			return err
		})
		if rollbackStep, err = c.TryOpts(workflow.TryOptions{Name: "undo-step", Catch: []workflow.TryCatch{workflow.CatchRollback}}, func(c *logCtx) error {
			_, err := workflow.Step(c, "u", func(*logStep) (int, error) { return 0, workflow.Rollback(errors.New("undo")) })
			return err
		}); err != nil {
			return err
		}
		if rollbackBlock, err = c.TryOpts(workflow.TryOptions{Name: "undo-block", Catch: []workflow.TryCatch{workflow.CatchRollback}}, func(c *logCtx) error {
			return workflow.Rollback(errors.New("the block's own"))
		}); err != nil {
			return err
		}
		// By default a Rollback is not caught.
		_, uncaught = c.Try("default", func(c *logCtx) error { return workflow.Rollback(errors.New("mine")) })
		_, invalid = c.TryOpts(workflow.TryOptions{Name: "bad", Catch: []workflow.TryCatch{"block"}}, func(c *logCtx) error { return nil })
		return nil
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	var je *workflow.JoinError
	if stepOnly != nil || !errors.As(passed, &je) {
		t.Errorf("a join failure in a block catching steps only: caught %+v, error %v", stepOnly, passed)
	}
	if rollbackStep == nil || rollbackStep.Source != workflow.SourceStep || rollbackStep.Kind != workflow.FailureRollback || rollbackStep.Name != "undo-step/u" {
		t.Errorf("a step's rollback failure: caught %+v", rollbackStep)
	}
	var rb *workflow.RollbackError
	if rollbackBlock == nil || rollbackBlock.Source != workflow.SourceBlock || rollbackBlock.Name != "undo-block" || !errors.As(rollbackBlock.Err, &rb) {
		t.Errorf("the block's own rollback: caught %+v", rollbackBlock)
	}
	if !errors.As(uncaught, &rb) {
		t.Errorf("a rollback in a default block: %v, want it returned", uncaught)
	}
	if !errors.Is(invalid, workflow.ErrInvalid) {
		t.Errorf("an unknown catch kind: %v, want ErrInvalid", invalid)
	}
}

// A block that answers a step's failure with a Rollback of its own asks
// for the rollback: its Rollback, outside the step's error, is what the
// block returned (SourceBlock), caught only with CatchRollback, not the
// step failure it wraps, which a default Try would catch.
func TestTryBlockRollbackOfAStepFailure(t *testing.T) {
	h := newHost(log{})
	var (
		caught           *workflow.Failure
		uncaught, passed error
	)
	out := drive(t, h, func(c *logCtx) error {
		undo := func(name string) func(c *logCtx) error {
			return func(c *logCtx) error {
				_, err := workflow.StepOpts(c, workflow.StepOptions{Name: name, MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
					return 0, errors.New("no")
				})
				return workflow.Rollback(err)
			}
		}
		var err error
		if caught, err = c.TryOpts(workflow.TryOptions{Name: "rollback", Catch: []workflow.TryCatch{workflow.CatchRollback}}, undo("s")); err != nil {
			return err
		}
		_, passed = c.TryOpts(workflow.TryOptions{Name: "steps", Catch: []workflow.TryCatch{workflow.CatchStep}}, undo("s"))
		_, uncaught = c.Try("default", undo("s"))
		return nil
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if caught == nil || caught.Source != workflow.SourceBlock || caught.Name != "rollback" {
		t.Errorf("the block's Rollback of a step failure, catching rollback: caught %+v", caught)
	}
	var rb *workflow.RollbackError
	if !errors.As(passed, &rb) {
		t.Errorf("the block's Rollback of a step failure, catching steps: %v, want it returned", passed)
	}
	if !errors.As(uncaught, &rb) {
		t.Errorf("the block's Rollback of a step failure in a default block: %v, want it returned", uncaught)
	}
}

// A name used twice in one scope is a mistake in the code, on a new run
// as on a replay: the error says so, naming the name and its scope, and
// sends no one to a version gate, which would not fix it (a user trial:
// a new run's duplicate read as a code change that needed a gate). It
// still matches ErrDiverged, as Rivet's HistoryDivergedError.
func TestANameUsedTwiceSaysSo(t *testing.T) {
	twice := func(c *logCtx) error { return seq2(c, "a", "b", "a") }
	inLoop := func(c *logCtx) error {
		return c.Loop("l", func(c *logCtx) error { return seq2(c, "x", "x") })
	}
	check := func(t *testing.T, out workflow.Outcome, name, scope, path string) {
		t.Helper()
		de := failedWith[*workflow.DivergenceError](t, out)
		if !errors.Is(out.Err, workflow.ErrDiverged) || de.Path != path || !de.Reused {
			t.Fatalf("error %+v, want a name reused at %q", de, path)
		}
		msg := out.Err.Error()
		want := fmt.Sprintf("the name %q is used twice in %s (the second time by a step)", name, scope)
		if !strings.Contains(msg, want) || strings.Contains(msg, "diverged") || strings.Contains(msg, "GetVersion") {
			t.Fatalf("the error says %q: want %q, and no divergence or gate", msg, want)
		}
	}
	t.Run("new run", func(t *testing.T) {
		check(t, drive(t, newHost(log{}), twice), "a", "the workflow's top level", "a")
	})
	t.Run("new run in a loop iteration", func(t *testing.T) {
		check(t, drive(t, newHost(log{}), inLoop), "x", `scope "l/~0"`, "l/~0/x")
	})
	t.Run("replay", func(t *testing.T) {
		h := inFlight(t, func(c *logCtx) error { return seq2(c, "a", "b", "?w") })
		check(t, drive(t, h, func(c *logCtx) error { return seq2(c, "a", "b", "a", "?w") }), "a", "the workflow's top level", "a")
	})
}

// seq2 runs steps in order, a name starting with '?' a receive.
func seq2(c *logCtx, names ...string) error {
	for _, n := range names {
		var err error
		if strings.HasPrefix(n, "?") {
			err = wait(c, n[1:])
		} else {
			err = note(c, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// A deploy that added a gate, rolled back: an instance in flight that
// replayed under the gated code recorded its old path (version 1) there,
// and the code from before the gate, which does what the old path does,
// replays that history and goes on (a user trial: every such instance
// failed with a divergence, so a gated deploy could not be rolled back,
// nor an instance move to a node not yet upgraded). The gated code,
// deployed again, still finds its version. An instance that took the new
// path cannot go back: its divergence says an older build replays it.
func TestCodeFromBeforeAGateReplaysTheGatesOldPath(t *testing.T) {
	rest := func(c *logCtx) error {
		for _, n := range []string{"b", "d"} {
			if err := wait(c, "w-"+n); err != nil {
				return err
			}
			if err := note(c, n); err != nil {
				return err
			}
		}
		return nil
	}
	v1 := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		if err := c.Sleep("nap", time.Hour); err != nil {
			return err
		}
		return rest(c)
	}
	var versions []int
	gated := func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		v, err := c.GetVersion("add-c", 2)
		if err != nil {
			return err
		}
		versions = append(versions, v)
		if v >= 2 {
			if err := note(c, "c"); err != nil {
				return err
			}
		}
		if err := c.Sleep("nap", time.Hour); err != nil {
			return err
		}
		return rest(c)
	}
	h := inFlight(t, v1) // asleep past the gate's place, then waiting
	h.Send("q", job{1})
	if out := drive(t, h, gated); out.Status != workflow.RunYielded {
		t.Fatalf("the gated code on the instance in flight: %+v (%v)", out, out.Err)
	}
	if e := entryAt(t, h.History(), "add-c"); e.Version != 1 {
		t.Fatalf("the instance in flight recorded %+v, want version 1", e)
	}
	if out := drive(t, h, v1); out.Status != workflow.RunYielded { // rolled back
		t.Fatalf("the code from before the gate on its old path: %+v (%v)", out, out.Err)
	}
	h.Send("q", job{2})
	if out := drive(t, h, v1); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a", "b", "d"}) {
		t.Fatalf("the code from before the gate, to the end: %+v (%v), log %v", out, out.Err, h.State().Log)
	}
	if out := drive(t, h, gated); out.Status != workflow.RunCompleted { // deployed again
		t.Fatalf("the gated code, on the history both made: %+v (%v)", out, out.Err)
	}
	if !reflect.DeepEqual(versions, []int{1, 1}) {
		t.Fatalf("versions %v, want the old path both times", versions)
	}

	h2 := newHost(log{})
	if out := drive(t, h2, gated); out.Status != workflow.RunYielded || !reflect.DeepEqual(h2.State().Log, []string{"a", "c"}) {
		t.Fatalf("a new instance under the gated code: %+v (%v), log %v", out, out.Err, h2.State().Log)
	}
	out := drive(t, h2, v1)
	var d *workflow.DivergenceError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &d) || d.Path != "add-c" || d.Gate != 2 || !strings.Contains(out.Err.Error(), "older build") {
		t.Fatalf("the code from before the gate on its new path: %+v (%v), want a divergence at add-c saying an older build replays it", out, out.Err)
	}
}
