package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// inspect shows a workflow's steps in flight (through gRPC, from the
// node's Inspection): each on a line, its attempt, since when it runs or
// when its next attempt does, and the error of the attempt before on one
// line; -o json carries them whole.
func TestInspectShowsPendingSteps(t *testing.T) {
	f := servertest.NewFake()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	long := strings.Repeat("x", 200)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{
			Info:           runtime.ActorInfo{Ref: ref, CreatedAt: at, Partition: 7, Owner: "node-1"},
			State:          json.RawMessage(`{}`),
			Active:         true,
			WorkflowStatus: runtime.WorkflowRunning,
			PendingSteps: []runtime.PendingStep{
				{Path: "charge-loop/~3/charge-card", Attempt: 2, MaxAttempts: 4, StartedAt: at.Add(time.Minute), LastError: "card declined\nby the bank"},
				{Path: "par/b/fetch", Attempt: 3, MaxAttempts: 4, LastError: long, NextAttemptAt: at.Add(2 * time.Minute)},
				{Path: "par/c/fetch", Attempt: 1, StartedAt: at}, // from an older node: no maximum
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "inspect", "orderActor", "o1").want(t, 0, `actor         orderActor o1
partition     7
owner         node-1
created       2026-01-02T03:04:05Z
active        true
workflow      running
pending step  charge-loop/~3/charge-card  attempt 2 of 4 running since 2026-01-02T03:05:05Z  last error: card declined; by the bank
              par/b/fetch  attempt 3 of 4 at 2026-01-02T03:06:05Z (retry backoff)  last error: `+strings.Repeat("x", 119)+`…
              par/c/fetch  attempt 1 running since 2026-01-02T03:04:05Z
state
{}
`)
	r := rivetctl(t, addr, "inspect", "orderActor", "o1", "-o", "json")
	var in client.Inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
		t.Fatalf("inspect json: %v (%+v)", err, r)
	}
	want := []client.PendingStep{
		{Path: "charge-loop/~3/charge-card", Attempt: 2, MaxAttempts: 4, StartedAt: at.Add(time.Minute), LastError: "card declined\nby the bank"},
		{Path: "par/b/fetch", Attempt: 3, MaxAttempts: 4, LastError: long, NextAttemptAt: at.Add(2 * time.Minute)},
		{Path: "par/c/fetch", Attempt: 1, StartedAt: at},
	}
	if len(in.PendingSteps) != len(want) {
		t.Fatalf("inspect json: pending steps %+v, want %+v", in.PendingSteps, want)
	}
	for i, w := range want {
		g := in.PendingSteps[i]
		if g.Path != w.Path || g.Attempt != w.Attempt || g.MaxAttempts != w.MaxAttempts || !g.StartedAt.Equal(w.StartedAt) || g.LastError != w.LastError || !g.NextAttemptAt.Equal(w.NextAttemptAt) {
			t.Errorf("inspect json: pending step %d is %+v, want %+v", i, g, w)
		}
	}
	if strings.Contains(r.stdout, `"next_attempt_at":"0001`) || strings.Contains(r.stdout, `"started_at":"0001`) {
		t.Errorf("inspect json: a time not known shown as year 1:\n%s", r.stdout)
	}
}
