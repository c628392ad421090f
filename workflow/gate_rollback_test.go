package workflow_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// op is a piece of a workflow, for building the builds of a deploy.
type op func(c *logCtx) error

func opStep(n string) op  { return func(c *logCtx) error { return note(c, n) } }
func opRecv(n string) op  { return func(c *logCtx) error { return wait(c, n) } }
func opSleep(n string) op { return func(c *logCtx) error { return c.Sleep(n, time.Hour) } }

// opGate is a gate n (latest 2) whose new path is a step "n-new".
func opGate(n string) op {
	return func(c *logCtx) error {
		v, err := c.GetVersion(n, 2)
		if err == nil && v >= 2 {
			err = note(c, n+"-new")
		}
		return err
	}
}

func opSeq(ops ...op) op {
	return func(c *logCtx) error {
		for _, o := range ops {
			if err := o(c); err != nil {
				return err
			}
		}
		return nil
	}
}

func opTry(n string, ops ...op) op {
	return func(c *logCtx) error {
		_, err := c.Try(n, func(c *logCtx) error { return opSeq(ops...)(c) })
		return err
	}
}

func opJoin(n string, branches map[string][]op) op {
	return func(c *logCtx) error {
		b := workflow.Branches[log, int]{}
		for k, ops := range branches {
			b[k] = func(c *logCtx) (int, error) { return 0, opSeq(ops...)(c) }
		}
		_, err := workflow.Join(c, n, b)
		return err
	}
}

// opLoop runs iters iterations of ops.
func opLoop(n string, iters int, ops ...op) op {
	return func(c *logCtx) error {
		_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: n}, func(c *logCtx, i int) (int, error) {
			if i >= iters {
				return i, workflow.Break
			}
			return i + 1, opSeq(ops...)(c)
		})
		return err
	}
}

// Code from before gates, rolled back to after the gated code recorded
// their old paths and entries past them, records entries of its own that
// both builds replay, and runs no step twice: each instance is in flight
// under the old build, replayed by the gated one, rolled back, replayed
// by both again, and run to its end by the old one. The reviews' finds:
// the gated build counted its gates in its places (two in one scope
// made the old build's next entries take places before entries it came
// after), a block or gate the old build reached fresh was placed at the
// skipped gate's place, a try block holding only an old-path gate was
// not skipped with it.
func TestCodeFromBeforeGatesRecordsEntriesBothBuildsReplay(t *testing.T) {
	for _, c := range []struct {
		name       string
		old, gated op
	}{
		{"two gates in one scope",
			opSeq(opStep("a"), opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("z"), opRecv("w3")),
			opSeq(opStep("a"), opGate("g1"), opGate("g2"), opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("z"), opRecv("w3"))},
		{"a try block reached fresh past a skipped gate",
			opSeq(opStep("a"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opTry("t", opStep("t-b")), opRecv("w3")),
			opSeq(opStep("a"), opGate("g1"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opTry("t", opStep("t-b")), opRecv("w3"))},
		{"a gate of both builds reached fresh past a skipped one",
			opSeq(opStep("a"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opGate("g0"), opRecv("w3")),
			opSeq(opStep("a"), opGate("g1"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opGate("g0"), opRecv("w3"))},
		{"a gate alone in a try block new with it",
			opSeq(opStep("a"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3")),
			opSeq(opStep("a"), opTry("t", opGate("t-g")), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3"))},
		{"gates in a join branch",
			opSeq(opStep("a"), opJoin("j", map[string][]op{
				"A": {opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("y")},
				"B": {opStep("b")},
			}), opRecv("w3")),
			opSeq(opStep("a"), opJoin("j", map[string][]op{
				"A": {opGate("g1"), opGate("g2"), opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("y")},
				"B": {opStep("b")},
			}), opRecv("w3"))},
		{"a gate in the loop iteration in flight",
			opSeq(opStep("a"), opLoop("L", 1, opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("y")), opRecv("w3")),
			opSeq(opStep("a"), opLoop("L", 1, opGate("g1"), opSleep("nap"), opRecv("w1"), opStep("x"), opRecv("w2"), opStep("y")), opRecv("w3"))},
		{"a gate in nested try blocks new with it",
			opSeq(opStep("a"), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3")),
			opSeq(opStep("a"), opTry("t1", opTry("t2", opGate("g"))), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3"))},
		{"a gate at the end of a try block recorded before",
			opSeq(opStep("a"), opTry("t", opStep("s1")), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3")),
			opSeq(opStep("a"), opTry("t", opStep("s1"), opGate("g")), opSleep("nap"), opRecv("w1"), opRecv("w2"), opStep("s"), opRecv("w3"))},
		{"a try block holding only a gate before a try block in flight",
			opSeq(opStep("a"), opTry("t", opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opRecv("w3")),
			opSeq(opStep("a"), opTry("tg", opGate("g")), opTry("t", opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opRecv("w3"))},
		{"two gates, in a new try block and in the one in flight",
			opSeq(opStep("a"), opTry("t", opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opStep("z"), opRecv("w3")),
			opSeq(opStep("a"), opTry("tg", opGate("g")), opTry("t", opGate("h"), opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opStep("z"), opRecv("w3"))},
		{"a gate in the try block in flight",
			opSeq(opStep("a"), opTry("t", opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opRecv("w3")),
			opSeq(opStep("a"), opTry("t", opGate("g"), opSleep("nap"), opRecv("w1"), opStep("s1"), opRecv("w2"), opStep("s2")), opRecv("w3"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := inFlight(t, c.old) // waiting for w1, past the gates' places
			for _, step := range []struct {
				what string
				send bool
				fn   op
				want workflow.RunStatus
			}{
				{"gated, on the instance in flight", true, c.gated, workflow.RunYielded},
				{"old, rolled back", true, c.old, workflow.RunYielded},
				{"old, again", false, c.old, workflow.RunYielded},
				{"gated, deployed again", false, c.gated, workflow.RunYielded},
				{"old, to the end", true, c.old, workflow.RunCompleted},
			} {
				if step.send {
					h.Send("q", job{1})
				}
				if out := drive(t, h, step.fn); out.Status != step.want {
					for _, e := range h.History() {
						t.Logf("  %-16s %-14s seq=%d try=%v version=%d", e.Path, e.Kind, e.Seq, e.TryPlaces, e.Version)
					}
					t.Fatalf("%s: %+v (%v), want %s", step.what, out, out.Err, step.want)
				}
			}
			got := h.State().Log
			sorted := slices.Sorted(slices.Values(got))
			if len(slices.Compact(sorted)) != len(got) {
				t.Fatalf("steps run %v: one ran twice", got)
			}
			for _, n := range got {
				if n != "g0-new" && len(n) > 4 && n[len(n)-4:] == "-new" {
					t.Fatalf("steps run %v: a gate recorded on its old path took its new one", got)
				}
			}
		})
	}
}
