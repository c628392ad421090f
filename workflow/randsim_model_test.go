package workflow_test

import (
	"testing"
	"time"
)

// The random simulation's model of a race whose branch took a message in
// a nested race it lost: the nested race gives the message back when it
// is decided, at g, and with it the claim on the race around, which a
// branch that finished before g waited for and now wins, at its time. A
// branch acting at g (the one that gave the claim back going on, or one
// finishing then) races the decision: the model replaces it (seeds 61803
// and 60269 at size 28, where it took the claim for kept and let it).
func TestRandomSimModelClaimGivenBack(t *testing.T) {
	prog := func(next []*rsNode, other time.Duration) *rsProg {
		inner := &rsNode{kind: rsRaceK, name: "inner", bnames: []string{"x", "y"}, branches: [][]*rsNode{
			{{kind: rsRecvK, name: "take", queue: "q"}, {kind: rsFailK, name: "drop", retries: -1, base: 100 * time.Millisecond}},
			{{kind: rsSleepK, name: "z", d: 3 * time.Second}},
		}}
		return &rsProg{seed: 1, nodes: []*rsNode{{kind: rsRaceK, name: "r", bnames: []string{"a", "b"}, branches: [][]*rsNode{
			append([]*rsNode{inner}, next...),
			{{kind: rsSleepK, name: "z", d: other}},
		}}}}
	}
	never := func(p *rsProg, b int) bool { return p.nodes[0].branches[b][0].name == "never" }
	step := &rsNode{kind: rsStepK, name: "s", retries: 3, base: 100 * time.Millisecond}

	// b finished at 2.9 s and waited: it wins at its time when a gives
	// the claim back, at 3 s.
	p := prog(nil, 2900*time.Millisecond)
	if r := p.settle(); never(p, 0) || never(p, 1) || r.end != 2900*time.Millisecond {
		t.Errorf("a gives the claim back at 3 s: race ends at %v, want b's 2.9 s\n%s", r.end, p)
	}
	// a's step at 3 s may run before b is picked, or not.
	p = prog([]*rsNode{step}, 2900*time.Millisecond)
	if p.settle(); !never(p, 0) || never(p, 1) {
		t.Errorf("a steps as it gives the claim back: a should be replaced\n%s", p)
	}
	// b finishes as a gives the claim back.
	p = prog(nil, 3*time.Second)
	if p.settle(); never(p, 0) || !never(p, 1) {
		t.Errorf("b finishes as a gives the claim back: b should be replaced\n%s", p)
	}
}
