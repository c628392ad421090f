package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// An Inspect forwarded to the actor's owner (over the peer stream, as a
// node that does not own the actor sends it) carries the workflow's steps
// in flight, each field of them.
func TestAForwardedInspectCarriesThePendingSteps(t *testing.T) {
	f := servertest.NewFake()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{
			Info: runtime.ActorInfo{Ref: ref}, State: json.RawMessage(`{}`), Active: true,
			PendingSteps: []runtime.PendingStep{
				{Path: "charge-loop/~3/charge-card", Attempt: 2, StartedAt: at, LastError: "card declined"},
				{Path: "ship", Attempt: 4, LastError: "carrier down", NextAttemptAt: at.Add(time.Minute)},
			},
		}, nil
	}
	pc, _ := peerPair(t, f)
	resp, err := rivetv1.NewActorServiceClient(pc).Inspect(ctx(t), &rivetv1.InspectRequest{Actor: &rivetv1.ActorRef{Name: "order", Key: []string{"o1"}}})
	if err != nil {
		t.Fatal(err)
	}
	ps := resp.GetPendingSteps()
	if len(ps) != 2 {
		t.Fatalf("pending steps %v, want 2", ps)
	}
	if p := ps[0]; p.GetPath() != "charge-loop/~3/charge-card" || p.GetAttempt() != 2 || !p.GetStartedAt().AsTime().Equal(at) ||
		p.GetLastError() != "card declined" || p.GetNextAttemptAt() != nil {
		t.Errorf("running step: %v", p)
	}
	if p := ps[1]; p.GetPath() != "ship" || p.GetAttempt() != 4 || p.GetStartedAt() != nil ||
		p.GetLastError() != "carrier down" || !p.GetNextAttemptAt().AsTime().Equal(at.Add(time.Minute)) {
		t.Errorf("step in its backoff: %v", p)
	}
}

// A join of many steps, each retried after an error of up to 16 KiB, is
// still inspected: over a response's bound, the longest errors come cut,
// saying so, and every step is there.
func TestAnInspectionOfManyPendingStepsCutsTheirErrors(t *testing.T) {
	f := servertest.NewFake()
	long := strings.Repeat("e", 16<<10)
	const n = 100 // 1.6 MiB of errors, over the 1 MiB and a bit of these limits
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		in := runtime.Inspection{Info: runtime.ActorInfo{Ref: ref}, State: json.RawMessage(`{}`), Active: true}
		for i := range n {
			in.PendingSteps = append(in.PendingSteps, runtime.PendingStep{Path: fmt.Sprintf("par/b%d/fetch", i), Attempt: 2, StartedAt: time.Now(), LastError: long})
		}
		return in, nil
	}
	small := server.Limits{MaxArgsBytes: 64 << 10, MaxResultBytes: 64 << 10, MaxMessageBytes: 64 << 10, MaxInputBytes: 64 << 10}
	addr := servertest.Start(t, f, servertest.Config{Limits: small})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rivetv1.NewActorServiceClient(conn).Inspect(ctx(t), &rivetv1.InspectRequest{Actor: &rivetv1.ActorRef{Name: "fan", Key: []string{"k"}}})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	ps := resp.GetPendingSteps()
	if len(ps) != n {
		t.Fatalf("%d pending steps, want %d", len(ps), n)
	}
	cut := 0
	for _, p := range ps {
		switch e := p.GetLastError(); {
		case e == long:
		case strings.HasSuffix(e, fmt.Sprintf("... (cut: %d bytes in all)", len(long))) && len(e) < len(long):
			cut++
		default:
			t.Fatalf("step %s: last error of %d bytes, neither whole nor cut saying so", p.GetPath(), len(e))
		}
	}
	if cut == 0 {
		t.Errorf("no error cut, in a response of %d steps with %d bytes of error each", n, len(long))
	}
}
