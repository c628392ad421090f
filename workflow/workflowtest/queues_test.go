package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// With the actor's queues given, a receive from a misspelt queue fails the
// run at once, as on a node, instead of yielding to wait for a message no
// send can queue; and a send to one panics, as a node refuses it.
func TestAHostGivenTheQueuesRefusesAMisspeltOne(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Name, h.Queues = "orders", []string{"orders", "cancel"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"ordres"}})
		return err
	}, workflowtest.DriveOptions{})
	if ctx.Err() != nil {
		t.Fatal("the run did not end")
	}
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) || !strings.Contains(out.Err.Error(), `actor orders has no queue "ordres" (it has cancel, orders)`) {
		t.Fatalf("outcome %v %v; want failed with ErrInvalid naming the queue", out.Status, out.Err)
	}
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), `has no queue "cancle"`) {
			t.Fatalf("send to a misspelt queue: recovered %v, want a panic naming it", v)
		}
	}()
	h.Send("cancle", 1)
}

// Drive's yield says why it stopped the run: a run waiting for a message
// that is not queued yields with ErrWaitsForMessages (an eviction), not
// context.Canceled, which read as a failure (a user trial).
func TestDrivesYieldSaysWhyItStoppedTheRun(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"orders"}})
		return err
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunYielded || !errors.Is(out.Err, workflowtest.ErrWaitsForMessages) || !errors.Is(out.Err, workflow.ErrEvicted) {
		t.Fatalf("outcome %v %v; want a yield with ErrWaitsForMessages", out.Status, out.Err)
	}
}

type checkout struct {
	Item string `json:"item"`
}

type confirm struct {
	OK bool `json:"ok"`
}

// A receive without names takes from the queues of its message type only:
// a Next[checkout] took a confirm queue's message first and decoded it,
// its fields unknown, into an empty checkout (a user trial). A receive of
// json.RawMessage takes from any queue.
func TestAReceiveWithoutNamesTakesFromTheQueuesOfItsType(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Name = "orders"
	h.QueueTypes = rivet.Queues{"checkout": rivet.QueueOf[checkout](), "confirm": rivet.QueueOf[confirm]()}.Types()
	h.Send("confirm", confirm{OK: true})
	h.Send("checkout", checkout{Item: "book"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		co, err := workflow.Next[checkout](c, "wait-checkout")
		if err != nil {
			return err
		}
		got = append(got, co.Name+":"+co.Body.Item)
		raw, err := workflow.Next[json.RawMessage](c, "wait-any")
		if err != nil {
			return err
		}
		got = append(got, raw.Name+":"+string(raw.Body))
		return nil
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunCompleted || strings.Join(got, " ") != `checkout:book confirm:{"ok":true}` {
		t.Fatalf("outcome %v %v, took %q; want the checkout, then the confirm", out.Status, out.Err, got)
	}
}

// With QueueTypes, a send whose body does not decode into its queue's type
// panics, as a node refuses it; without Client, a step's call fails
// saying so, rather than panic on a nil client.
func TestAHostChecksBodiesAndSaysItHasNoClient(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.QueueTypes = rivet.Queues{"amounts": rivet.QueueOf[int]()}.Types()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		return c.Step("ask", func(s *workflow.StepCtx[struct{}]) error {
			_, err := s.Client().Get("bank", "b").Call(s.Context(), "balance")
			return workflow.Critical(err)
		})
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed || !strings.Contains(out.Err.Error(), "Host.Client is not set") {
		t.Fatalf("outcome %v %v; want failed, saying Client is not set", out.Status, out.Err)
	}
	defer func() {
		if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "does not decode into its type int") {
			t.Fatalf("a send of a body its queue's type refuses: recovered %v, want a panic saying so", v)
		}
	}()
	h.Send("amounts", "ten")
}

// An actor that declares no queue refuses every name, on a node as here:
// QueueTypes made from its empty rivet.Queues took any name, and a
// receive from one waited for a message no send could queue.
func TestAHostWhoseActorHasNoQueueRefusesEveryName(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Name, h.QueueTypes = "orders", rivet.Queues{}.Types()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"orders"}})
		return err
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) || !strings.Contains(out.Err.Error(), `actor orders has no queue "orders" (it has none)`) {
		t.Fatalf("outcome %v %v; want failed with ErrInvalid, naming no queue", out.Status, out.Err)
	}
}
