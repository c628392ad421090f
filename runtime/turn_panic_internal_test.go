package runtime

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

//go:noinline
func panicInAWorkflowTurn() { panic("turn bug") }

// A panic in a workflow turn outside the engine's guard (a bug of the
// node's) evicts the run and is logged once at ERROR with the actor and
// its stack, as the engine's panics are: it was logged with no stack,
// which left nothing to find it by.
func TestAPanicOutsideTheEnginesGuardLogsItsStack(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	h := &Host{log: zap.New(core)}
	a := &activation{ref: Ref{Name: "wf", Key: []string{"k"}}}
	_, err := h.runWorkflowTurn(a, func() ([]storage.Op, error) {
		panicInAWorkflowTurn()
		return nil, nil
	})
	if !errors.Is(err, workflow.ErrEvicted) || !strings.Contains(err.Error(), "turn bug") {
		t.Fatalf("err = %v, want an eviction naming the panic", err)
	}
	found := logs.FilterMessage("workflow step panicked outside the engine's guard").All()
	if len(found) != 1 {
		t.Fatalf("%d logs of the panic, want 1: %+v", len(found), logs.All())
	}
	m := found[0].ContextMap()
	if stack, _ := m["stack"].(string); !strings.Contains(stack, "panicInAWorkflowTurn") {
		t.Fatalf("the log's stack %q names no frame of the panic", stack)
	}
	if m["actor"] == nil || m["panic"] != "turn bug" {
		t.Fatalf("the log's fields %v: want the actor and the panic", m)
	}
}
