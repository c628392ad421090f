package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/rivet-go/rivet"
)

// A health Watch (gRPC's client-side health checking opens one on every
// node a client uses) ends as the stop stops serving, after telling
// NOT_SERVING: the health server ends none, and GracefulStop waited for
// it, and the release of the node's partitions after that, until the
// stop's deadline. The stop's context here is long: a stop that waits
// for the watch runs out of it, one that does not ends well before (under
// a second, on a machine not loaded).
func TestAHealthWatchDoesNotHoldUpAStop(t *testing.T) {
	type st struct{ N int }
	reg, err := rivet.Setup(rivet.Actor[st]{Name: "watchW", Actions: rivet.Actions[st]{
		"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := clusterStarter(t, ctx, reg, "/stop-watch-test/", 4)("a", nil)
	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	epoch := a.epoch()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch = %v, %v; want SERVING", r, err)
	}
	watched := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		var seen []healthpb.HealthCheckResponse_ServingStatus
		for {
			r, err := w.Recv()
			if err != nil {
				watched <- seen
				return
			}
			seen = append(seen, r.GetStatus())
		}
	}()
	const budget = 20 * time.Second
	sctx, scancel := context.WithTimeout(context.Background(), budget)
	defer scancel()
	// A lease lost since the watch began (a machine so loaded that the
	// lease's renewals came late) turned the node NOT_SERVING, and then
	// SERVING again, before the stop: the watch tells those too.
	leaseLost := a.epoch() != epoch
	began := time.Now()
	if err := a.Stop(sctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	took := time.Since(began)
	// Whether the stop ran out of its budget, not how long it took: the
	// watch ends a stop that waits for it only at its deadline, and a
	// loaded machine makes one that does not slower, not that late.
	if sctx.Err() != nil {
		t.Errorf("the stop ran out of its budget (%v, took %v): it waited for the watch", budget, took)
	}
	select {
	case seen := <-watched:
		switch {
		case len(seen) == 0 || seen[len(seen)-1] != healthpb.HealthCheckResponse_NOT_SERVING:
			t.Errorf("the watch saw %v before it ended; want NOT_SERVING last", seen)
		case len(seen) != 1 && !leaseLost:
			t.Errorf("the watch saw %v before it ended, and the node kept its lease; want NOT_SERVING alone", seen)
		}
	case <-ctx.Done():
		t.Fatal("the watch never ended")
	}
}

// A health Watch that the stop ends is told NOT_SERVING first, however
// late its goroutine runs: the health server's Watch picks at random
// between a status to send and the end of its context when both are
// ready, so a watch whose goroutine had not run between the health
// server's Shutdown and the end of the watches (a loaded machine) ended,
// one time in two, without NOT_SERVING, and its client was never told.
// Here the watch's goroutine is held in its first send (SERVING) across
// both.
func TestAWatchEndedByTheStopIsToldNotServingFirst(t *testing.T) {
	var watch grpc.StreamHandler
	for _, s := range healthpb.Health_ServiceDesc.Streams {
		if s.StreamName == "Watch" {
			watch = s.Handler
		}
	}
	info := &grpc.StreamServerInfo{FullMethod: healthpb.Health_Watch_FullMethodName, IsServerStream: true}
	for i := range 20 {
		n := &Node{health: health.NewServer()} // "" SERVING
		n.watchesEnd, n.endWatches = context.WithCancel(context.Background())
		ss := newHeldWatch(t)
		ended := make(chan error, 1)
		go func() { ended <- n.refuseStreamsWhileClosing(n.health, ss, info, watch) }()
		select {
		case <-ss.sending:
		case <-time.After(10 * time.Second):
			t.Fatal("the watch sent nothing in 10 s")
		}
		n.health.Shutdown()
		n.endWatches()
		// Gives an end of the watch that does not wait for it to be told
		// its chance to come first; the watch waits on no timer.
		time.Sleep(20 * time.Millisecond)
		close(ss.release)
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end in 10 s")
		}
		if got := ss.statuses(); len(got) != 2 || got[1] != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("trial %d: the watch sent %v; want SERVING, then NOT_SERVING", i, got)
		}
	}
}

// heldWatch is a Watch's server stream whose first send waits until
// release is closed.
type heldWatch struct {
	ctx     context.Context
	sending chan struct{} // closed as the first send begins
	release chan struct{}
	mu      sync.Mutex
	sent    []healthpb.HealthCheckResponse_ServingStatus
}

func newHeldWatch(t *testing.T) *heldWatch {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &heldWatch{ctx: ctx, sending: make(chan struct{}), release: make(chan struct{})}
}

func (s *heldWatch) statuses() []healthpb.HealthCheckResponse_ServingStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]healthpb.HealthCheckResponse_ServingStatus(nil), s.sent...)
}

func (s *heldWatch) SendMsg(m any) error {
	s.mu.Lock()
	first := len(s.sent) == 0
	s.sent = append(s.sent, m.(*healthpb.HealthCheckResponse).GetStatus())
	s.mu.Unlock()
	if first {
		close(s.sending)
		<-s.release
	}
	return nil
}

func (s *heldWatch) RecvMsg(m any) error {
	*m.(*healthpb.HealthCheckRequest) = healthpb.HealthCheckRequest{}
	return nil
}

func (s *heldWatch) Context() context.Context     { return s.ctx }
func (s *heldWatch) SetHeader(metadata.MD) error  { return nil }
func (s *heldWatch) SendHeader(metadata.MD) error { return nil }
func (s *heldWatch) SetTrailer(metadata.MD)       {}

// The stop waits for its watches to be told NOT_SERVING side by side, not
// one after another: each wait is bounded by watchToldWait, and a stop
// with many watches whose clients stopped reading (each would wait the
// whole of it) ends them all in about that, not in watchToldWait times
// their number.
func TestTheStopWaitsForItsWatchesToBeToldTogether(t *testing.T) {
	const watches = 1000
	n := &Node{health: health.NewServer()}
	n.watchesEnd, n.endWatches = context.WithCancel(context.Background())
	info := &grpc.StreamServerInfo{FullMethod: healthpb.Health_Watch_FullMethodName, IsServerStream: true}
	// A watch that told SERVING, and then is never told again: what a
	// watch whose client stopped reading looks like to endWhenTold.
	stuck := func(srv any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(&healthpb.HealthCheckRequest{}); err != nil {
			return err
		}
		if err := ss.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
		<-ss.Context().Done()
		return nil
	}
	var started, ended sync.WaitGroup
	for range watches {
		ss := newHeldWatch(t)
		close(ss.release)
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			_ = n.refuseStreamsWhileClosing(n.health, startedWatch{ss, started.Done}, info, stuck)
		}()
	}
	started.Wait()
	n.health.Shutdown()
	began := time.Now()
	n.endWatches()
	all := make(chan struct{})
	go func() { ended.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(15 * watchToldWait):
		t.Fatalf("%d watches did not end in %v", watches, 15*watchToldWait)
	}
	if took := time.Since(began); took < watchToldWait || took > 5*watchToldWait {
		t.Errorf("%d watches ended in %v; want about %v (the wait of one)", watches, took, watchToldWait)
	}
}

// startedWatch calls started once its watch has sent its first status.
type startedWatch struct {
	*heldWatch
	started func()
}

func (s startedWatch) SendMsg(m any) error {
	err := s.heldWatch.SendMsg(m)
	s.started()
	return err
}
