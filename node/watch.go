package node

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// watchToldWait bounds how long the end of a health Watch waits for the
// watch to send the status it has to tell (endWhenTold): a client that
// stopped reading holds its sends.
const watchToldWait = 2 * time.Second

// watchStream is a health Watch's server stream with a context of its own,
// which the stop ends (endWhenTold), and which knows what the watch asked
// for and what it told last.
type watchStream struct {
	grpc.ServerStream
	ctx context.Context
	// changed has a value once the request is read or a status sent.
	changed chan struct{}

	mu      sync.Mutex
	service string
	asked   bool
	told    healthpb.HealthCheckResponse_ServingStatus
	sent    bool
}

func newWatchStream(ss grpc.ServerStream, ctx context.Context) *watchStream {
	return &watchStream{ServerStream: ss, ctx: ctx, changed: make(chan struct{}, 1)}
}

func (s *watchStream) Context() context.Context { return s.ctx }

func (s *watchStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*healthpb.HealthCheckRequest); ok && err == nil {
		s.mu.Lock()
		s.service, s.asked = r.GetService(), true
		s.mu.Unlock()
		s.change()
	}
	return err
}

func (s *watchStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if r, ok := m.(*healthpb.HealthCheckResponse); ok && err == nil {
		s.mu.Lock()
		s.told, s.sent = r.GetStatus(), true
		s.mu.Unlock()
		s.change()
	}
	return err
}

func (s *watchStream) change() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// endWhenTold calls end once the watch has told its client the status
// that hs has for it now (NOT_SERVING, the stop having shut hs down), or
// its stream ended, or watchToldWait passed. Ended at once, a watch whose
// goroutine had not run since the shutdown ended without telling it, one
// time in two: the health server's Watch picks at random between a status
// to send and the end of its context when both are ready. Its client
// (gRPC's client-side health checking) then never heard that the node
// stopped serving; a loaded machine made it likely.
func (s *watchStream) endWhenTold(hs *health.Server, end context.CancelFunc) {
	defer end()
	wait := time.NewTimer(watchToldWait)
	defer wait.Stop()
	for !s.toldOf(hs) {
		select {
		case <-s.changed:
		case <-wait.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// toldOf says whether the watch told last the status hs has for its
// service (SERVICE_UNKNOWN for one hs does not know, as Watch says).
func (s *watchStream) toldOf(hs *health.Server) bool {
	s.mu.Lock()
	service, asked, told, sent := s.service, s.asked, s.told, s.sent
	s.mu.Unlock()
	if !asked || !sent {
		return false
	}
	want := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	if r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service}); err == nil {
		want = r.GetStatus()
	}
	return told == want
}
