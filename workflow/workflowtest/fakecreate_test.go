package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type orchState struct {
	Children []string `json:"children"`
}

type childInput struct {
	Order string `json:"order"`
}

// orchestrate creates one child per order with its input, in a step keyed
// by the step, as Temporal starts child workflows.
func orchestrate(orders ...string) func(*workflow.Ctx[orchState]) error {
	return func(c *workflow.Ctx[orchState]) error {
		for _, o := range orders {
			if err := c.Step("spawn-"+o, func(s *workflow.StepCtx[orchState]) error {
				res, err := rivet.CreateWith(s.Context(), s.Client(), "child", []string{o}, childInput{Order: o},
					rivet.CreateOptions{IdempotencyKey: s.IdempotencyKey("create")})
				if err != nil {
					return err
				}
				s.State.Children = append(s.State.Children, res.Key[0])
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	}
}

// A workflow's step creates children through a FakeClient: each child's
// input reaches HandleCreate's function, and a crash after a create (the
// step's record lost) runs the step again, whose create, with the step's
// key, is the first one's duplicate: the child is made once.
func TestFakeClientCreatesChildrenOnceAcrossACrash(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	var inputs []string
	fc.HandleCreate("child", func(_ context.Context, call workflowtest.FakeCall) error {
		var in childInput
		if err := json.Unmarshal(call.Input, &in); err != nil {
			return err
		}
		inputs = append(inputs, call.Key[0]+"="+in.Order) // one step runs at a time
		return nil
	})
	h := workflowtest.NewHost(orchState{}, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	h.Client = fc
	h.CrashAt(1, false) // the first step's record never commits
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, orchestrate("o1", "o2"), workflowtest.DriveOptions{MaxActivations: 20})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v %v, want completed", out.Status, out.Err)
	}
	if got := h.State().Children; !slices.Equal(got, []string{"o1", "o2"}) {
		t.Fatalf("children %q, want o1 o2", got)
	}
	if !slices.Equal(inputs, []string{"o1=o1", "o2=o2"}) {
		t.Fatalf("creates that ran: %q, want each child's once, with its input", inputs)
	}
	var creates, dups int
	for _, c := range fc.Calls() {
		if !c.Create || c.Err != nil {
			t.Fatalf("record %v, want a create that succeeded", c)
		}
		creates++
		if c.Duplicate {
			dups++
			if c.Key[0] != "o1" || !c.CreateResult.Duplicate {
				t.Fatalf("duplicate %v, want o1's (the crashed step's)", c)
			}
		}
	}
	if creates != 3 || dups != 1 {
		t.Fatalf("%d creates recorded, %d duplicates; want 3, 1: %v", creates, dups, fc.Calls())
	}
}

// A FakeClient answers a create as a node does: ALREADY_EXISTS for an
// actor that exists (made by a create without the key, by Create, by a
// GetOrCreate call), INVALID_ARGUMENT for a key with another input or an
// invalid key, ErrUnknownActor for a name it was given nothing of; and a
// create its CreateFunc fails makes nothing.
func TestFakeClientCreateAnswersAsANode(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	refuse := true
	fc.HandleCreate("child", func(_ context.Context, call workflowtest.FakeCall) error {
		if refuse && call.Key[0] == "refused" {
			return errors.New("no such order")
		}
		if call.Key[0] == "refusedAsNotFound" {
			// A node answers any CreateState error as INVALID_ARGUMENT,
			// whatever its kind.
			return rivet.Errorf(rivet.ErrNotFound, "no such order")
		}
		return nil
	})
	fc.Handle("child", "ping", func(context.Context, workflowtest.FakeCall) (any, error) { return "pong", nil })

	info, err := rivet.Create(ctx, fc, "child", []string{"a"}, childInput{Order: "a"})
	if err != nil || info.Name != "child" || !slices.Equal(info.Key, []string{"a"}) {
		t.Fatalf("Create = %+v, %v", info, err)
	}
	if _, err := rivet.Create(ctx, fc, "child", []string{"a"}, childInput{Order: "a"}); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("Create again = %v, want ErrAlreadyExists", err)
	}
	if _, err := rivet.CreateWith(ctx, fc, "child", []string{"a"}, childInput{Order: "a"}, rivet.CreateOptions{IdempotencyKey: "k"}); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("a keyed create of an actor created without the key = %v, want ErrAlreadyExists", err)
	}
	// A Get finds what a create made.
	if s, err := rivet.Call[string](ctx, fc.Get("child", "a"), "ping"); err != nil || s != "pong" {
		t.Fatalf("Get of the created actor: %q %v", s, err)
	}

	keyed := rivet.CreateOptions{IdempotencyKey: "create-b"}
	if res, err := rivet.CreateWith(ctx, fc, "child", []string{"b"}, json.RawMessage(`{"order":"b"}`), keyed); err != nil || res.Duplicate {
		t.Fatalf("keyed create = %+v, %v", res, err)
	}
	if res, err := rivet.CreateWith(ctx, fc, "child", []string{"b"}, childInput{Order: "b"}, keyed); err != nil || !res.Duplicate {
		t.Fatalf("keyed create again (the same input as JSON) = %+v, %v; want its duplicate", res, err)
	}
	if _, err := rivet.CreateWith(ctx, fc, "child", []string{"b"}, childInput{Order: "x"}, keyed); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("the key with another input = %v, want ErrInvalidArgument", err)
	}

	fc.Create("child", "made")
	if _, err := rivet.CreateWith(ctx, fc, "child", []string{"made"}, nil, keyed); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("create of an actor the test made = %v, want ErrAlreadyExists", err)
	}
	if _, err := rivet.Call[string](ctx, fc.GetOrCreate("child", "got"), "ping"); err != nil {
		t.Fatal(err)
	}
	if _, err := rivet.Create(ctx, fc, "child", []string{"got"}, nil); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("create of an actor a GetOrCreate call made = %v, want ErrAlreadyExists", err)
	}

	if _, err := rivet.Create(ctx, fc, "child", []string{"refused"}, nil); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a create its CreateFunc fails = %v, want ErrInvalidArgument", err)
	}
	if _, err := rivet.Create(ctx, fc, "child", []string{"refusedAsNotFound"}, nil); !errors.Is(err, rivet.ErrInvalidArgument) || errors.Is(err, rivet.ErrNotFound) || !strings.Contains(err.Error(), "no such order") {
		t.Fatalf("a create its CreateFunc fails with a NOT_FOUND = %v, want ErrInvalidArgument with its message, as a node answers", err)
	}
	refuse = false
	if _, err := rivet.Create(ctx, fc, "child", []string{"refused"}, nil); err != nil {
		t.Fatalf("the create again, accepted: %v (the refused one made nothing)", err)
	}
	if _, err := rivet.Create(ctx, fc, "child", nil, nil); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a create with no key = %v, want ErrInvalidArgument", err)
	}
	if _, err := rivet.Create(ctx, fc, "stranger", []string{"a"}, nil); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("a create of a name the fake was given nothing of = %v, want ErrUnknownActor", err)
	}
}

// Without Client, a step's create fails saying so, as its calls do.
func TestAHostWithoutAClientSaysSoToACreate(t *testing.T) {
	h := workflowtest.NewHost(orchState{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[orchState]) error {
		return c.Step("spawn", func(s *workflow.StepCtx[orchState]) error {
			_, err := rivet.Create(s.Context(), s.Client(), "child", []string{"a"}, nil)
			return workflow.Critical(err)
		})
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed || !strings.Contains(out.Err.Error(), "Host.Client is not set") {
		t.Fatalf("outcome %v %v; want failed, saying Client is not set", out.Status, out.Err)
	}
}
