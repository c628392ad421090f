package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// retryingFake answers RetryingWorkflows with its list, and keeps the
// query it was asked.
type retryingFake struct {
	*servertest.Fake
	list  []runtime.RetryingWorkflow
	asked chan runtime.RetryingQuery
}

var _ server.RetryingWorkflowser = (*retryingFake)(nil)

func (f *retryingFake) RetryingWorkflows(q runtime.RetryingQuery) []runtime.RetryingWorkflow {
	f.asked <- q
	return f.list[:min(q.Limit, len(f.list))]
}

// A node with a thousand retrying workflows, each with many steps and
// long errors, still answers (it went over the transport's bound, and the
// whole answer failed): a few steps each, errors cut, about 1 MiB of
// workflows, and counts of what was left out.
func TestALargeRetryingAnswerIsBoundedAndCounted(t *testing.T) {
	const workflows, steps = 1000, 20
	long := strings.Repeat("e", 2000)
	f := &retryingFake{Fake: servertest.NewFake(), asked: make(chan runtime.RetryingQuery, 1)}
	for i := range workflows {
		w := runtime.RetryingWorkflow{Ref: runtime.Ref{Name: "invoice", Key: []string{fmt.Sprintf("k%04d", i)}}}
		for j := range steps {
			w.Steps = append(w.Steps, runtime.PendingStep{Path: fmt.Sprintf("par/b%d/send", j), Attempt: 3, MaxAttempts: 10, LastError: long})
		}
		f.list = append(f.list, w)
	}
	addr := servertest.Start(t, f, servertest.Config{})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rivetv1.NewAdminServiceClient(conn).Stats(ctx(t), &rivetv1.StatsRequest{
		Retrying: workflows, RetryingName: "invoice", RetryingErrorContains: "eee",
	})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if q := <-f.asked; q.Limit != workflows || q.Name != "invoice" || q.ErrorContains != "eee" {
		t.Errorf("the backend was asked %+v, want the request's limit, name and error", q)
	}
	if !resp.GetRetryingCounted() {
		t.Error("retrying not counted")
	}
	if size := proto.Size(resp); size > 3<<19 {
		t.Errorf("answer of %d bytes, want about 1 MiB at most", size)
	}
	got := resp.GetRetryingWorkflows()
	if len(got) == 0 || resp.GetRetryingOmitted() == 0 || len(got)+int(resp.GetRetryingOmitted()) != workflows {
		t.Fatalf("%d workflows and %d left out, want some of each, %d in all", len(got), resp.GetRetryingOmitted(), workflows)
	}
	for i, w := range got {
		if want := fmt.Sprintf("k%04d", i); w.GetKey()[0] != want {
			t.Fatalf("workflow %d is %v, want %s (the first ones, in order)", i, w.GetKey(), want)
		}
		if len(w.GetSteps()) != 5 || w.GetStepsOmitted() != steps-5 {
			t.Fatalf("workflow %v: %d steps and %d left out, want 5 and %d", w.GetKey(), len(w.GetSteps()), w.GetStepsOmitted(), steps-5)
		}
		for _, s := range w.GetSteps() {
			if len(s.GetLastError()) != 256 {
				t.Fatalf("workflow %v step %s: error of %d bytes, want it cut to 256", w.GetKey(), s.GetPath(), len(s.GetLastError()))
			}
		}
	}
}
