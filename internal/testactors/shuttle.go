package testactors

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
)

// ShuttleState is the state of a Shuttle: the messages it took from its
// queues "a" and "b", its retried steps' work, its loop's iterations.
type ShuttleState struct {
	GotA  []int `json:"got_a"`
	GotB  []int `json:"got_b"`
	Work  int   `json:"work"`
	Iters int   `json:"iters"`
}

// Shuttle returns a workflow actor that is mid-join or mid-race almost all
// the time, for tests that move it between nodes as messages arrive: it
// loops through a join (a batch receive with a timeout; a sleep then a
// step that fails twice before it commits) and a race (a completable
// receive with a timeout, which sometimes fails holding its message, so
// that the race puts it back, against a sleep), until it has taken wantA
// messages from queue "a" and wantB from queue "b" (ints; each one from
// "b" is completed with ten times its value). Action "get" returns the
// state.
func Shuttle(name string, wantA, wantB int) rivet.Actor[ShuttleState] {
	return rivet.Actor[ShuttleState]{
		Name:   name,
		Queues: rivet.Queues{"a": rivet.QueueOf[int](), "b": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[ShuttleState]) error {
			return ctx.Loop("l", func(lc *workflow.Ctx[ShuttleState]) error {
				it, err := workflow.Step(lc, "it", func(s *workflow.StepCtx[ShuttleState]) (int, error) { return s.State.Iters, nil })
				if err != nil {
					return err
				}
				if _, err := workflow.Join(lc, "j", workflow.Branches[ShuttleState, int]{
					"a": func(bc *workflow.Ctx[ShuttleState]) (int, error) {
						ms, err := workflow.NextBatch[int](bc, "take-a", workflow.NextOptions{Names: []string{"a"}, Count: 3, Timeout: 150 * time.Millisecond})
						if err != nil {
							return 0, err
						}
						return len(ms), bc.Step("rec-a", func(s *workflow.StepCtx[ShuttleState]) error {
							for _, m := range ms {
								s.State.GotA = append(s.State.GotA, m.Body)
							}
							return nil
						})
					},
					"b": func(bc *workflow.Ctx[ShuttleState]) (int, error) {
						if err := bc.Sleep("nap", 30*time.Millisecond); err != nil {
							return 0, err
						}
						return 0, bc.StepWith(workflow.StepOptions{Name: "work", RetryBackoffBase: 10 * time.Millisecond}, func(s *workflow.StepCtx[ShuttleState]) error {
							if s.Attempt() < 3 {
								return errors.New("flaky")
							}
							s.State.Work++
							return nil
						})
					},
				}); err != nil {
					return err
				}
				if _, _, err := workflow.Race(lc, "r", []workflow.RaceBranch[ShuttleState, int]{
					{Name: "msg", Run: func(rc *workflow.Ctx[ShuttleState]) (int, error) {
						m, err := workflow.Next[int](rc, "take-b", workflow.NextOptions{Names: []string{"b"}, Timeout: 200 * time.Millisecond, Completable: true})
						if err != nil {
							return 0, err
						}
						if (m.Body+it)%3 == 0 {
							// Failed holding it: the race puts it back.
							return 0, errors.New("not now")
						}
						if err := rc.Step("rec-b", func(s *workflow.StepCtx[ShuttleState]) error {
							s.State.GotB = append(s.State.GotB, m.Body)
							return nil
						}); err != nil {
							return 0, err
						}
						return m.Body, m.Complete(m.Body * 10)
					}},
					{Name: "tick", Run: func(rc *workflow.Ctx[ShuttleState]) (int, error) {
						return -1, rc.Sleep("tick", 120*time.Millisecond)
					}},
				}); err != nil {
					return err
				}
				done, err := workflow.Step(lc, "count", func(s *workflow.StepCtx[ShuttleState]) (bool, error) {
					s.State.Iters++
					return len(s.State.GotA) >= wantA && len(s.State.GotB) >= wantB, nil
				})
				if err != nil {
					return err
				}
				if done {
					return workflow.Break
				}
				return nil
			})
		},
		Actions: rivet.Actions[ShuttleState]{"get": rivet.Query(func(c *rivet.ActionCtx[ShuttleState]) (ShuttleState, error) { return *c.State, nil })},
	}
}

// ShuttleTraffic sends a Shuttle its messages, on goroutines counted in
// wg: 0..wantA-1 to queue "a" one after the other, without waiting, and
// 100..100+wantB-1 to queue "b" at once, each waiting for its completion.
// It puts on errs (room for wantA+wantB) each send that failed and each
// completion that is not the shuttle's (ten times the body), and otherwise
// accepts "completed" or "enqueued" (the wait ran out as the workflow moved).
func ShuttleTraffic(wg *sync.WaitGroup, errs chan<- error, wantA, wantB int, send func(q string, body int, wait bool) (caller.SendResult, error)) {
	wg.Go(func() {
		for i := range wantA {
			if _, err := send("a", i, false); err != nil {
				errs <- err
				return
			}
		}
	})
	for i := range wantB {
		wg.Go(func() {
			res, err := send("b", 100+i, true)
			switch {
			case err != nil:
				errs <- err
			case res.Status == caller.SendCompleted && string(res.Response) != fmt.Sprint((100+i)*10):
				errs <- fmt.Errorf("b %d completed with %s", 100+i, res.Response)
			case res.Status != caller.SendCompleted && res.Status != caller.SendEnqueued:
				errs <- fmt.Errorf("b %d: %+v", 100+i, res)
			}
		})
	}
}

// Check says what is wrong with the final state of a Shuttle that
// ShuttleTraffic fed with wantA and wantB messages: each message taken
// exactly once, and the retried step committed once per iteration. Empty
// if nothing.
func (s ShuttleState) Check(wantA, wantB int) []string {
	var bad []string
	a, b := slices.Sorted(slices.Values(s.GotA)), slices.Sorted(slices.Values(s.GotB))
	wa, wb := make([]int, wantA), make([]int, wantB)
	for i := range wa {
		wa[i] = i
	}
	for i := range wb {
		wb[i] = 100 + i
	}
	if !slices.Equal(a, wa) || !slices.Equal(b, wb) {
		bad = append(bad, fmt.Sprintf("messages taken:\n a %v\n b %v\nwant each once", a, b))
	}
	if s.Work != s.Iters {
		bad = append(bad, fmt.Sprintf("work step committed %d times in %d iterations", s.Work, s.Iters))
	}
	return bad
}
