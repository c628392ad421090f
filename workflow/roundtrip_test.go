package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// halfWay decodes back only a value that is not Bad: a Bad one marshals
// to JSON its UnmarshalJSON rejects, so no replay could read it.
type halfWay struct {
	Bad bool
	N   int
}

func (h *halfWay) UnmarshalJSON(b []byte) error {
	type plain halfWay
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.Bad {
		return errors.New("halfWay reads no bad one")
	}
	*h = halfWay(p)
	return nil
}

// lossy loses Live in its JSON: what a replay reads has Live false.
type lossy struct {
	N    int
	Live bool `json:"-"`
}

// saysDecodeBack checks that msg says a value of type halfWay does not
// decode back, and why.
func saysDecodeBack(t *testing.T, msg string) {
	t.Helper()
	for _, want := range []string{"workflow_test.halfWay", "does not decode back", "halfWay reads no bad one"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not say %q", msg, want)
		}
	}
}

// A join branch whose value marshals but does not decode back fails as
// the branch, when it returns (a *JoinError naming the join and the
// branch, the type and the cause), as a step with such a value does: not
// with a *DecodeError once the join is recorded completed with a value no
// replay reads, which says a type changed since when none did. Its
// sibling, whose value decodes back, completes as it would have. A replay
// fails the same way, from the record.
func TestAJoinBranchValueThatDoesNotDecodeBackFailsTheBranch(t *testing.T) {
	h := newHost(rst{})
	goodRan := 0
	wf := func(c *workflow.Ctx[rst]) error {
		_, err := workflow.Join(c, "j", workflow.Branches[rst, halfWay]{
			"bad": func(*workflow.Ctx[rst]) (halfWay, error) { return halfWay{Bad: true}, nil },
			"good": func(c *workflow.Ctx[rst]) (halfWay, error) {
				return workflow.Step(c, "s", func(*workflow.StepCtx[rst]) (halfWay, error) { goodRan++; return halfWay{N: 1}, nil })
			},
		})
		return err
	}
	out := drive(t, h, wf)
	if errors.Is(out.Err, workflow.ErrDecode) {
		t.Fatalf("failed as a recorded value that no longer decodes: %v", out.Err)
	}
	je := failedWith[*workflow.JoinError](t, out)
	if je.Path != "j" || len(je.Errors) != 1 || je.Errors["bad"] == nil {
		t.Fatalf("join error %+v, want join \"j\" failed in branch \"bad\" only", je)
	}
	saysDecodeBack(t, je.Errors["bad"].Error())
	if e := entryAt(t, h.History(), "j"); e.Branches["good"].Status != workflow.StatusCompleted || e.Branches["bad"].Status != workflow.StatusFailed {
		t.Fatalf("recorded branches %+v", e.Branches)
	}
	again := drive(t, h, wf)
	if je2 := failedWith[*workflow.JoinError](t, again); je2.Path != "j" || je2.Errors["bad"] == nil {
		t.Fatalf("replay: %v", again.Err)
	}
	if goodRan != 1 {
		t.Fatalf("the good branch's step ran %d times", goodRan)
	}
}

// A race branch whose value does not decode back fails when it returns,
// rather than win with a value no replay reads: another branch wins. If
// it was the only one, the race fails naming it, the type and the cause.
func TestARaceBranchValueThatDoesNotDecodeBackCannotWin(t *testing.T) {
	t.Run("another wins", func(t *testing.T) {
		h := newHost(rst{})
		wf := func(c *workflow.Ctx[rst]) error {
			w, v, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, halfWay]{
				{Name: "bad", Run: func(*workflow.Ctx[rst]) (halfWay, error) { return halfWay{Bad: true}, nil }},
				{Name: "good", Run: func(c *workflow.Ctx[rst]) (halfWay, error) {
					return workflow.Step(c, "s", func(*workflow.StepCtx[rst]) (halfWay, error) { return halfWay{N: 2}, nil })
				}},
			})
			if err != nil {
				return err
			}
			if w != "good" || v != (halfWay{N: 2}) {
				t.Errorf("race returned %q %+v, want \"good\" {N:2}", w, v)
			}
			return nil
		}
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted {
			t.Fatalf("outcome %s %v", out.Status, out.Err)
		}
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted {
			t.Fatalf("replay: %s %v", out.Status, out.Err)
		}
	})
	t.Run("alone", func(t *testing.T) {
		h := newHost(rst{})
		out := drive(t, h, func(c *workflow.Ctx[rst]) error {
			_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, halfWay]{
				{Name: "bad", Run: func(*workflow.Ctx[rst]) (halfWay, error) { return halfWay{Bad: true}, nil }},
			})
			return err
		})
		if errors.Is(out.Err, workflow.ErrDecode) {
			t.Fatalf("failed as a recorded value that no longer decodes: %v", out.Err)
		}
		re := failedWith[*workflow.RaceError](t, out)
		if re.Path != "r" || len(re.Errors) != 1 || re.Errors[0].Name != "bad" {
			t.Fatalf("race error %+v, want race \"r\" failed in branch \"bad\"", re)
		}
		saysDecodeBack(t, re.Errors[0].Err.Error())
	})
}

// A loop state that does not decode back is misuse, as one that does not
// marshal is: ErrInvalid naming the loop (and the iteration that returned
// it, or the first state), the type and the cause, when it is returned,
// rather than a *DecodeError when the next iteration (or the loop's
// caller) reads it, with it recorded at a checkpoint meanwhile.
func TestALoopStateThatDoesNotDecodeBackIsInvalid(t *testing.T) {
	for name, c := range map[string]struct {
		first  halfWay
		badAt  int // the iteration that returns a bad state
		brk    bool
		saying string
	}{
		"first state":        {first: halfWay{Bad: true}, badAt: -1, saying: "first state"},
		"an iteration's":     {badAt: 1, saying: "iteration 1"},
		"the one it ends on": {badAt: 2, brk: true, saying: "iteration 2"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			iterations := 0
			out := drive(t, h, func(ctx *workflow.Ctx[rst]) error {
				_, err := workflow.LoopWith(ctx, workflow.LoopOptions[halfWay]{Name: "l", State: c.first, HistoryPruneInterval: 1},
					func(ctx *workflow.Ctx[rst], s halfWay) (halfWay, error) {
						i := iterations
						iterations++
						if s.Bad {
							t.Errorf("iteration %d got a bad state", i)
						}
						if i == c.badAt {
							s.Bad = true
							if c.brk {
								return s, workflow.Break
							}
						}
						if i > 3 {
							return s, workflow.Break
						}
						return s, nil
					})
				return err
			})
			if errors.Is(out.Err, workflow.ErrDecode) || !errors.Is(out.Err, workflow.ErrInvalid) {
				t.Fatalf("outcome %s %v, want a failure with ErrInvalid", out.Status, out.Err)
			}
			msg := out.Err.Error()
			if !strings.Contains(msg, `loop "l"`) || !strings.Contains(msg, c.saying) {
				t.Fatalf("error %q does not name the loop and %s", msg, c.saying)
			}
			saysDecodeBack(t, msg)
			if want := c.badAt + 1; iterations != want {
				t.Fatalf("%d iterations ran, want %d", iterations, want)
			}
		})
	}
}

// The values a join, a race and a loop return live are the ones a replay
// reads from their records (decoded back), as a step's are: Live, which
// their JSON loses, is false in all of them, and in the state each
// iteration of a loop gets.
func TestJoinRaceAndLoopValuesAreLiveAsOnReplay(t *testing.T) {
	h := newHost(rst{})
	var got []lossy
	wf := func(c *workflow.Ctx[rst]) error {
		got = got[:0]
		j, err := workflow.Join(c, "j", workflow.Branches[rst, lossy]{
			"a": func(*workflow.Ctx[rst]) (lossy, error) { return lossy{N: 1, Live: true}, nil },
		})
		if err != nil {
			return err
		}
		got = append(got, j["a"])
		_, r, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, lossy]{
			{Name: "a", Run: func(*workflow.Ctx[rst]) (lossy, error) { return lossy{N: 2, Live: true}, nil }},
		})
		if err != nil {
			return err
		}
		got = append(got, r)
		l, err := workflow.LoopWith(c, workflow.LoopOptions[lossy]{Name: "l", State: lossy{N: 3, Live: true}},
			func(_ *workflow.Ctx[rst], s lossy) (lossy, error) {
				got = append(got, s)
				s.N++
				s.Live = true
				if s.N == 6 {
					return s, workflow.Break
				}
				return s, nil
			})
		got = append(got, l)
		return err
	}
	want := []lossy{{N: 1}, {N: 2}, {N: 3}, {N: 4}, {N: 5}, {N: 6}}
	for _, run := range []string{"live", "replay"} {
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted {
			t.Fatalf("%s: outcome %s %v", run, out.Status, out.Err)
		}
		if run == "replay" {
			want = []lossy{{N: 1}, {N: 2}, {N: 6}} // a completed loop runs no iteration
		}
		if len(got) != len(want) {
			t.Fatalf("%s: values %+v, want %+v", run, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: values %+v, want %+v", run, got, want)
			}
		}
	}
}
