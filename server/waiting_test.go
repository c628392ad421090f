package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// waitingFake answers WaitingWorkflows with its list, cut to the limit
// asked, the rest counted.
type waitingFake struct {
	*servertest.Fake
	list []runtime.WaitingWorkflow
}

var _ server.WaitingWorkflowser = (*waitingFake)(nil)

func (f *waitingFake) WaitingWorkflows(_ context.Context, _ string, q runtime.WaitQuery) (string, runtime.WaitList, uint32, error) {
	n := min(q.Limit, len(f.list))
	return "n1", runtime.WaitList{Workflows: f.list[:n], Omitted: len(f.list) - n + 7, Partitions: []uint32{0}}, 1, nil
}

// A thousand waiting workflows with long keys and queue lists (about 6 KiB
// each: 6 MiB in all, past gRPC's 4 MiB) still answer: about 1 MiB of
// them, the first ones in order, the rest counted with those the node
// left out already.
func TestALargeWaitingAnswerIsBoundedAndCounted(t *testing.T) {
	const workflows = 1000
	long := strings.Repeat("k", 2000)
	f := &waitingFake{Fake: servertest.NewFake()}
	for i := range workflows {
		f.list = append(f.list, runtime.WaitingWorkflow{
			Ref:    runtime.Ref{Name: "inbox", Key: []string{fmt.Sprintf("k%04d", i), long, long}},
			WakeAt: time.Unix(int64(i), 0), Reason: "receive", Queues: []string{long},
		})
	}
	addr := servertest.Start(t, f, servertest.Config{})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rivetv1.NewAdminServiceClient(conn).WaitingWorkflows(ctx(t), &rivetv1.WaitingWorkflowsRequest{Limit: workflows})
	if err != nil {
		t.Fatalf("waiting workflows: %v", err)
	}
	if size := proto.Size(resp); size > 3<<19 {
		t.Errorf("answer of %d bytes, want about 1 MiB at most", size)
	}
	got := resp.GetWorkflows()
	if len(got) == 0 || len(got)+int(resp.GetOmitted()) != workflows+7 || len(got) == workflows {
		t.Fatalf("%d workflows and %d left out, want some of each, %d in all", len(got), resp.GetOmitted(), workflows+7)
	}
	for i, w := range got {
		if want := fmt.Sprintf("k%04d", i); w.GetKey()[0] != want {
			t.Fatalf("workflow %d is %v, want %s (the first ones, in order)", i, w.GetKey()[0], want)
		}
	}
}
