package server

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// EventStream is one subscription to an actor's events, as the Backend
// holds it (runtime.Subscription).
type EventStream interface {
	// NodeID is the node that holds the subscription.
	NodeID() string
	// Ready has a value when events may be waiting; Take returns them,
	// oldest first, appended to buf.
	Ready() <-chan struct{}
	Take(buf []rivet.Event) []rivet.Event
	// Done is closed when the subscription has ended; Err then says why
	// (nil: closed by Close). Take may still return events then.
	Done() <-chan struct{}
	Err() error
	Close()
}

// relayedKey marks a Subscribe that a node relays to the actor's owner: the
// owner serves it or refuses it, and never relays it again (one hop, as
// forwarding). A client that sets it only gets the refusal.
const relayedKey = "rivet-relayed"

// Subscribe streams an actor's events. A node that does not serve the actor
// relays the owner's stream (the Router's connection), message by message.
func (s *Server) Subscribe(req *rivetv1.SubscribeRequest, stream rivetv1.ActorService_SubscribeServer) error {
	ctx := stream.Context()
	r, err := ref(req.GetActor())
	if err != nil {
		return s.toStatus(ctx, err)
	}
	for _, n := range req.GetEvents() {
		if err := rivet.ValidateName("event name", n); err != nil {
			return s.toStatus(ctx, err)
		}
	}
	if s.router != nil && len(metadata.ValueFromIncomingContext(ctx, relayedKey)) == 0 {
		conn, err := s.router.Route(ctx, r)
		if err == nil && conn != nil {
			return s.relaySubscribe(ctx, conn, req, stream)
		}
	}
	sub, err := s.backend.Subscribe(ctx, r, req.GetEvents())
	if err != nil {
		return s.toStatus(ctx, err)
	}
	defer sub.Close()
	s.streams.Add(1)
	defer s.streams.Add(-1)
	if err := stream.Send(&rivetv1.SubscribeResponse{Kind: &rivetv1.SubscribeResponse_Subscribed{Subscribed: &rivetv1.Subscribed{NodeId: sub.NodeID()}}}); err != nil {
		return err
	}
	// The batch is what waits on the node, up to the subscription's bound
	// (runtime.SubscriberBuffer, SubscriberBytes); while Send blocks on a
	// subscriber that does not read, as much again may wait before the
	// subscription overflows: the docs give the bound as twice that.
	var batch []rivet.Event
	send := func() error {
		batch = sub.Take(batch[:0])
		for i, ev := range batch {
			if err := stream.Send(&rivetv1.SubscribeResponse{Kind: &rivetv1.SubscribeResponse_Event{Event: &rivetv1.Event{Name: ev.Name, Data: ev.Data}}}); err != nil {
				return err
			}
			batch[i] = rivet.Event{}
		}
		return nil
	}
	for {
		select {
		case <-sub.Ready():
			if err := send(); err != nil {
				return err
			}
		case <-sub.Done():
			// What was published before the end goes out first.
			if err := send(); err != nil {
				return err
			}
			if err := sub.Err(); err != nil {
				return s.toStatus(ctx, err)
			}
			return nil
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return s.stopped(ctx)
		}
	}
}

// Streams is the Subscribe and Backup streams this server is serving or
// relaying now. After Shutdown, one that stays is blocked sending to a
// subscriber that stopped reading (HTTP/2 flow control): only closing its
// connection ends it.
func (s *Server) Streams() int64 { return s.streams.Load() }

// stopped is the status of a stream that Shutdown ended.
func (s *Server) stopped(ctx context.Context) error {
	return s.toStatus(ctx, rivet.Errorf(rivet.ErrUnavailable, "this node is stopping: subscribe again"))
}

// relaySubscribe passes the owner's Subscribe stream through to the
// subscriber. A status the owner sent passes as it is; a broken connection
// to the owner is UNAVAILABLE, for the subscriber to subscribe again.
func (s *Server) relaySubscribe(ctx context.Context, conn grpc.ClientConnInterface, req *rivetv1.SubscribeRequest, stream rivetv1.ActorService_SubscribeServer) error {
	if pc, ok := conn.(interface{ Conn() *grpc.ClientConn }); ok {
		conn = pc.Conn() // a PeerConn carries unary calls only
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, relayedKey, "1"))
	defer cancel()
	s.streams.Add(1)
	defer s.streams.Add(-1)
	// Shutdown ends the upstream stream too (this goroutine ends with ctx).
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	up, err := rivetv1.NewActorServiceClient(conn).Subscribe(ctx, req)
	for err == nil {
		var m *rivetv1.SubscribeResponse
		if m, err = up.Recv(); err == nil {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
	select {
	case <-s.stopping:
		return s.stopped(stream.Context())
	default:
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return relayError(err, stream.Context().Err() != nil)
}

// relayError is the status of a relayed stream that ended with err; left
// says that the subscriber left. A CANCELLED the subscriber did not cause
// is this node's connection to the owner closing (the owner's registration
// went: its lease expired): the stream broke, and the subscriber must
// subscribe again, not end its subscription.
func relayError(err error, left bool) error {
	st, ok := status.FromError(err)
	if ok && (rpcerr.HasActorError(st) || left && st.Code() == codes.Canceled) {
		// The owner's own status (but that it is stopping: this node is
		// not), or the subscriber left.
		return rpcerr.PassedOn(st).Err()
	}
	ust, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "the stream from the actor's owner broke (%v): subscribe again", err))
	return ust.Err()
}
