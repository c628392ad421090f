package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// bytesCodec sends and receives message bytes as they are, so that a test
// can send a request that does not decode.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (bytesCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

// serveAsNode serves every service a node does (actor, admin, peer,
// health, reflection) with the node's server options and interceptors in
// the node's order (the token, then limits and error bounds, then
// forwarding), and returns its address.
func serveAsNode(t *testing.T, token string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAsNodeOn(t, lis, token)
	return lis.Addr().String()
}

// serveAsNodeOn is serveAsNode on lis, with extra server options.
func serveAsNodeOn(t *testing.T, lis net.Listener, token string, extra ...grpc.ServerOption) {
	t.Helper()
	serveAsNodeWith(t, lis, token, nil, extra...)
}

// serveAsNodeWith is serveAsNodeOn with auth's options.
func serveAsNodeWith(t *testing.T, lis net.Listener, token string, auth []server.AuthOption, extra ...grpc.ServerOption) {
	t.Helper()
	limits := server.DefaultLimits()
	opts := append(server.AuthServerOptions(token, auth...), extra...)
	opts = append(opts, server.ServerOptions(limits)...)
	opts = append(opts, grpc.ChainUnaryInterceptor(server.ForwardingInterceptor(noRoute{})))
	gs := grpc.NewServer(opts...)
	srv := server.New(servertest.NewFake(), server.WithLimits(limits))
	srv.Register(gs)
	ps := server.NewPeerServer(srv)
	ps.Register(gs)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		srv.Shutdown()
		ps.Shutdown()
		gs.Stop()
		<-done
		ps.Wait()
	})
}

// A node with a token refuses, with UNAUTHENTICATED, every method of every
// service it serves except health's (actor, admin, the peers' forwarding
// streams, reflection), unary or streaming, without the token or with a
// wrong one, and whatever the request: one that does not even decode says UNAUTHENTICATED too, not
// that it does not decode.
func TestEveryMethodNeedsTheToken(t *testing.T) {
	addr := serveAsNode(t, "s3cret")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Served by the same kind of server: list its methods.
	gs := grpc.NewServer()
	srv := server.New(servertest.NewFake())
	srv.Register(gs)
	server.NewPeerServer(srv).Register(gs)
	reflection.Register(gs)
	var methods []string
	streams := map[string]bool{}
	for name, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + name + "/" + m.Name
			methods = append(methods, full)
			streams[full] = m.IsClientStream || m.IsServerStream
		}
	}
	if len(methods) < 20 {
		t.Fatalf("only %d methods: %v", len(methods), methods)
	}
	undecodable := []byte{0x0a, 0x02, 0xff, 0xfe} // field 1, bytes that are no UTF-8 and no message
	for _, m := range methods {
		for i, body := range [][]byte{{}, undecodable, {}} {
			c := ctx(t)
			if i == 2 {
				c = withAuth(c, "Bearer s3cre")
			}
			var err error
			if streams[m] {
				var s grpc.ClientStream
				s, err = conn.NewStream(c, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, m)
				if err == nil {
					// SendMsg says io.EOF when the server has ended the
					// stream already (the refusal can win the race with
					// the send): the status is RecvMsg's to tell.
					if err = s.SendMsg(&body); err == nil || errors.Is(err, io.EOF) {
						_ = s.CloseSend()
						var out []byte
						err = s.RecvMsg(&out)
					}
				}
			} else {
				var out []byte
				err = conn.Invoke(c, m, &body, &out)
			}
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s (%d bytes, wrong token %v): %v, want UNAUTHENTICATED", m, len(body), i == 2, err)
			}
		}
	}
	if !strings.Contains(strings.Join(methods, " "), "Forward") {
		t.Errorf("no peer methods in %v", methods)
	}
	var out []byte
	if err := conn.Invoke(ctx(t), healthpb.Health_Check_FullMethodName, new([]byte), &out); err != nil {
		t.Errorf("health without a token: %v", err)
	}
}

type noRoute struct{}

func (noRoute) Route(context.Context, runtime.Ref) (grpc.ClientConnInterface, error) { return nil, nil }
