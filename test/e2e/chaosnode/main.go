// Command chaosnode is cmd/node with four more actors for the e2e tests.
// completer completes the messages it takes after a step (see its doc).
// chaosFlow, for the chaos test, has a workflow that takes jobs from a queue
// and runs two steps with side effects the test can attribute (a POST
// naming the job, the step, the attempt's nonce and the node process that
// made it), then records the job. stubborn has an action that ignores its
// context (see its doc). poison's step kills its node (see its doc).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/workflow"
)

// Job is a message of chaosFlow's "jobs" queue.
type Job struct {
	ID string `json:"id"`
}

// FlowState is chaosFlow's state.
type FlowState struct {
	// Nonces holds, by "job/step", the nonce of the attempt that committed.
	Nonces map[string]string `json:"nonces"`
	// Consumed lists the jobs in the order the workflow finished them.
	Consumed []string `json:"consumed"`
}

// effect POSTs $CHAOS_EFFECTS_URL/effects/<job>/<step>?nonce=&inc= and
// returns the nonce.
func effect(ctx context.Context, job, step string) (string, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	u := fmt.Sprintf("%s/effects/%s/%s?nonce=%s&inc=%s", os.Getenv("CHAOS_EFFECTS_URL"), url.PathEscape(job), step, nonce, url.QueryEscape(os.Getenv("CHAOS_INCARNATION")))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("effect %s/%s: %s", job, step, resp.Status)
	}
	return nonce, nil
}

func effectStep(c *workflow.Ctx[FlowState], job, name string, before func(*workflow.StepCtx[FlowState]) error) error {
	body := effectStepBody(job, name, before)
	// Patient retries: a cross-node call fails (UNAVAILABLE) for as long
	// as its callee's partition has no live owner, and the default 4
	// attempts in under a second end the workflow (failed) when the
	// chaos keeps it unavailable longer.
	opts := workflow.StepOptions{Name: name, MaxRetries: 30, RetryBackoffMax: 2 * time.Second}
	_, err := workflow.StepOpts(c, opts, func(s *workflow.StepCtx[FlowState]) (struct{}, error) {
		return struct{}{}, body(s)
	})
	return err
}

func effectStepBody(job, name string, before func(*workflow.StepCtx[FlowState]) error) func(*workflow.StepCtx[FlowState]) error {
	return func(s *workflow.StepCtx[FlowState]) error {
		if before != nil {
			if err := before(s); err != nil {
				return err
			}
		}
		nonce, err := effect(s.Context(), job, name)
		if err != nil {
			return err
		}
		if s.State.Nonces == nil {
			s.State.Nonces = map[string]string{}
		}
		s.State.Nonces[job+"/"+name] = nonce
		return nil
	}
}

var chaosFlow = rivet.Actor[FlowState]{
	Name:   "chaosFlow",
	State:  FlowState{Nonces: map[string]string{}, Consumed: []string{}},
	Queues: rivet.Queues{"jobs": rivet.QueueOf[Job]()},
	Run: func(ctx *workflow.Ctx[FlowState]) error {
		return ctx.Loop("loop", func(lc *workflow.Ctx[FlowState]) error {
			msg, err := workflow.Next[Job](lc, "wait-job")
			if err != nil {
				return err
			}
			job := msg.Body.ID
			if err := effectStep(lc, job, "effect-a", nil); err != nil {
				return err
			}
			// A cross-node call inside the step, before its effect.
			if err := effectStep(lc, job, "effect-b", func(s *workflow.StepCtx[FlowState]) error {
				_, err := rivet.Call[int](s.Context(), s.Client().GetOrCreate("counter", "fx-"+job), "increment", 1)
				return err
			}); err != nil {
				return err
			}
			return lc.Step("record", func(s *workflow.StepCtx[FlowState]) error {
				s.State.Consumed = append(s.State.Consumed, job)
				return nil
			})
		})
	},
	Actions: rivet.Actions[FlowState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[FlowState]) (FlowState, error) { return *c.State, nil }),
	},
}

// Ask is a message of completer's "asks" queue.
type Ask struct {
	ID string `json:"id"`
}

// CompleterState is completer's state.
type CompleterState struct {
	// Done lists the asks in the order the workflow finished them.
	Done []string `json:"done"`
}

// completer takes each ask as a completable message, runs a step with a
// side effect (an effect POST of "<ask>/work", which the test can hold),
// records the ask and only then completes it with its ID: a sender that
// waits gets the completion of its own message, never another's.
var completer = rivet.Actor[CompleterState]{
	Name:   "completer",
	State:  CompleterState{Done: []string{}},
	Queues: rivet.Queues{"asks": rivet.QueueOf[Ask]()},
	Run: func(ctx *workflow.Ctx[CompleterState]) error {
		return ctx.Loop("loop", func(lc *workflow.Ctx[CompleterState]) error {
			msg, err := workflow.Next[Ask](lc, "wait-ask", workflow.NextOptions{Completable: true})
			if err != nil {
				return err
			}
			id := msg.Body.ID
			// A Do step holds no turn: while the test holds it, sends
			// queue more asks. No timeout: the test decides how long.
			opts := workflow.StepOptions{Name: "work", Timeout: workflow.NoTimeout, MaxRetries: 30, RetryBackoffMax: 2 * time.Second}
			if _, err := workflow.DoOpts(lc, opts, func(d *workflow.DoCtx) (struct{}, error) {
				_, err := effect(d.Context(), id, "work")
				return struct{}{}, err
			}); err != nil {
				return err
			}
			if err := lc.Step("record", func(s *workflow.StepCtx[CompleterState]) error {
				s.State.Done = append(s.State.Done, id)
				return nil
			}); err != nil {
				return err
			}
			return msg.Complete(map[string]string{"id": id})
		})
	},
	Actions: rivet.Actions[CompleterState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[CompleterState]) (CompleterState, error) { return *c.State, nil }),
	},
}

// StubbornState is stubborn's state.
type StubbornState struct{}

// stubborn's block ignores its context for a minute: a node stopping with
// it in progress waits out its stop's bound, the window in which the
// second-signal test sends its second signal.
var stubborn = rivet.Actor[StubbornState]{
	Name: "stubborn",
	Actions: rivet.Actions[StubbornState]{
		"block": rivet.Action0(func(c *rivet.ActionCtx[StubbornState]) (bool, error) {
			time.Sleep(time.Minute)
			return true, nil
		}),
	},
}

// PoisonState is poison's state.
type PoisonState struct{}

// poison's workflow has one step whose body kills its own node (SIGKILL,
// as the OOM killer does) at every attempt: with MaxRetries 1, its second
// attempt exhausts it and the workflow fails, where the node used to run
// it again as attempt 1 at every start, and die each time.
var poison = rivet.Actor[PoisonState]{
	Name: "poison",
	Run: func(ctx *workflow.Ctx[PoisonState]) error {
		return ctx.StepWith(workflow.StepOptions{Name: "crash", MaxRetries: 1, RetryBackoffBase: 10 * time.Millisecond},
			func(*workflow.StepCtx[PoisonState]) error {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Minute) // the signal ends the process first
				return nil
			})
	},
}

func main() {
	// examples.Registry checks the examples' environment.
	if _, err := examples.Registry(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
	node.Main(rivet.MustSetup(append(examples.All(), chaosFlow, completer, stubborn, poison)...))
}
