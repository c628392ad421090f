package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// send --require-running carries the option to the node, which refuses a
// send to an ended workflow; a duplicate the node answers after the
// workflow ended fails the command, as with --wait.
func TestSendRequireRunning(t *testing.T) {
	f := servertest.NewFake()
	var required atomic.Bool
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		required.Store(req.RequireRunning)
		if req.RequireRunning {
			return runtime.SendResult{}, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "ended", `orders ["main"] has no running workflow to receive the message (workflow completed): nothing was queued`)
		}
		return runtime.SendResult{MessageID: 3, Status: runtime.SendEnqueued, WorkflowStatus: "completed"}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--require-running").
		wantErr(t, 1, `rivetctl: failed precondition: orders ["main"] has no running workflow to receive the message (workflow completed): nothing was queued (FAILED_PRECONDITION workflow.ended)`)
	if !required.Load() {
		t.Error("--require-running did not reach the node")
	}
	// Without it the message is queued, as before, with a note.
	if r := rivetctl(t, addr, "send", "orders", "main", "incoming", "1"); r.code != 0 || r.stdout != "enqueued\n" || !strings.Contains(r.stderr, "note: the actor's workflow has completed") {
		t.Errorf("plain send to an ended workflow: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if required.Load() {
		t.Error("a send without --require-running asked for it")
	}
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 5, Status: runtime.SendEnqueued, Duplicate: true, WorkflowStatus: "completed"}, nil
	}
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "k", "--require-running").
		wantErr(t, 1, "rivetctl: a duplicate: message 5 was sent before with this idempotency key (by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again), and the actor's workflow has completed: nothing takes it unless the workflow runs again from an entry before its end (rivetctl workflow retry --from ENTRY; a retry without --from replays it to the same end); nothing more was queued")
}
