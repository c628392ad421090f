package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
)

// A receive that names a queue the actor does not have (a typo: "reminder"
// for "reminders") fails the workflow, saying so, rather than waiting for
// ever for a message that every send to that queue is refused.
func TestAReceiveNamingAQueueTheActorLacksFailsTheWorkflow(t *testing.T) {
	typo := rivet.Actor[noState]{
		Name:   "typo",
		Queues: rivet.Queues{"reminders": rivet.QueueOf[int]()},
		Run: func(c *workflow.Ctx[noState]) error {
			_, err := workflow.Next[int](c, "wait-reminder", workflow.NextOptions{Names: []string{"reminders", "reminder"}})
			return err
		},
	}
	c, _ := nodetest.Start(t, t.TempDir(), typo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := c.Actor("typo", "t")
	if _, err := h.Info(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := h.NoCreate().Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in.WorkflowStatus == "failed" {
			if !strings.Contains(in.WorkflowError, `no queue "reminder"`) {
				t.Fatalf("workflow failed with %q, want it to name the queue the actor lacks", in.WorkflowError)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow %s (waking on %v) 10 s after it began; want failed: it waits for a queue the actor lacks", in.WorkflowStatus, in.WorkflowWakeQueues)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
