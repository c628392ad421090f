package server_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// serveWithToken serves the fake with every service a node has (actor,
// admin, peer, health), behind the token interceptors as a node chains
// them, and returns a plaintext connection that sends creds (if any).
func serveWithToken(t *testing.T, token string, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(server.AuthUnaryInterceptor(token)),
		grpc.ChainStreamInterceptor(server.AuthStreamInterceptor(token)),
	)
	srv := server.New(servertest.NewFake())
	srv.Register(gs)
	ps := server.NewPeerServer(srv)
	ps.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ps.Shutdown()
		gs.Stop()
		<-done
	})
	return conn
}

func withAuth(ctx context.Context, value string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.Header, value)
}

// A node with a token refuses every actor, admin and peer call without it
// (UNAUTHENTICATED, with the detail the Go client turns into
// rivet.ErrUnauthenticated), and answers health probes without it.
func TestTokenIsRequiredExceptForHealth(t *testing.T) {
	conn := serveWithToken(t, "s3cret")
	actors, admin := rivetv1.NewActorServiceClient(conn), rivetv1.NewAdminServiceClient(conn)
	call := func(ctx context.Context) error {
		_, err := actors.Call(ctx, &rivetv1.CallRequest{Actor: ref("counter", "k"), Action: "getCount", Args: []byte("[]"), CreateIfMissing: true})
		return err
	}
	for _, tc := range []struct {
		name   string
		header string // "" sends none
		want   codes.Code
		msg    string
	}{
		{"no token", "", codes.Unauthenticated, auth.ErrNoToken.Error()},
		{"wrong token", "Bearer s3cre", codes.Unauthenticated, auth.ErrBadToken.Error()},
		{"token without its scheme", "s3cret", codes.Unauthenticated, auth.ErrNoToken.Error()},
		{"right token", "Bearer s3cret", codes.OK, ""},
		{"scheme in another case", "bearer s3cret", codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx(t)
			if tc.header != "" {
				c = withAuth(c, tc.header)
			}
			err := call(c)
			if status.Code(err) != tc.want {
				t.Fatalf("call: %v, want %v", err, tc.want)
			}
			if tc.want == codes.OK {
				return
			}
			if st := status.Convert(err); st.Message() != tc.msg {
				t.Errorf("message %q, want %q", st.Message(), tc.msg)
			}
			if e := rpcerr.FromStatus(status.Convert(err)); !errors.Is(e, rivet.ErrUnauthenticated) || e.Group != "request" || e.Code != "unauthenticated" {
				t.Errorf("the status carries %+v, want the unauthenticated kind", e)
			}
		})
	}

	if _, err := admin.Members(ctx(t), &rivetv1.MembersRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("admin without a token: %v", err)
	}
	// Without the token check on the peer stream, anyone could forward
	// requests, with call chains, as if they were a node.
	stream, err := rivetv1.NewPeerServiceClient(conn).ForwardBatches(ctx(t))
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("peer stream without a token: %v", err)
	}
	res, err := healthpb.NewHealthClient(conn).Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v, %v", res, err)
	}
	if _, err := healthpb.NewHealthClient(conn).List(ctx(t), &healthpb.HealthListRequest{}); err != nil {
		t.Errorf("health's List without a token: %v", err)
	}
	// Watch holds a stream and a goroutine for as long as its caller
	// keeps it: open, anyone could hold any number of them (50,000 took
	// 760 MB of a node from 5 connections in 8 s).
	w, err := healthpb.NewHealthClient(conn).Watch(ctx(t), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("health's Watch without a token: %v, want UNAUTHENTICATED", err)
	}
}

// A PeerConn over a connection with the token's credentials (as nodes dial
// each other) gets through: the stream is authenticated once, when it
// opens, and carries every forwarded call.
func TestPeerStreamWithToken(t *testing.T) {
	conn := serveWithToken(t, "s3cret", grpc.WithPerRPCCredentials(auth.NewCredentials("s3cret")))
	pc := server.NewPeerConn(conn)
	defer pc.Close()
	for want := 1; want <= 2; want++ {
		var resp rivetv1.CallResponse
		err := pc.Invoke(ctx(t), rivetv1.ActorService_Call_FullMethodName,
			&rivetv1.CallRequest{Actor: ref("counter", "k"), Action: "increment", Args: []byte("[1]"), CreateIfMissing: true}, &resp)
		if err != nil || string(resp.GetResult()) != strconv.Itoa(want) {
			t.Fatalf("forwarded increment: %s, %v", resp.GetResult(), err)
		}
	}
}

// Without a token the interceptors let everything through: the default,
// for a node on loopback.
func TestNoTokenConfiguredLetsCallsThrough(t *testing.T) {
	conn := serveWithToken(t, "")
	if _, err := rivetv1.NewAdminServiceClient(conn).Members(ctx(t), &rivetv1.MembersRequest{}); err != nil {
		t.Fatal(err)
	}
}

// A node whose token differs from its peer's cannot forward: the peer
// refuses the stream before running anything, so the forward fails as not
// sent (UNAVAILABLE, which the forwarder tells its client to retry), and
// the message says why.
func TestPeerStreamWithAnotherToken(t *testing.T) {
	conn := serveWithToken(t, "s3cret", grpc.WithPerRPCCredentials(auth.NewCredentials("other")))
	pc := server.NewPeerConn(conn)
	defer pc.Close()
	var resp rivetv1.CallResponse
	err := pc.Invoke(ctx(t), rivetv1.ActorService_Call_FullMethodName,
		&rivetv1.CallRequest{Actor: ref("counter", "k"), Action: "increment", Args: []byte("[1]"), CreateIfMissing: true}, &resp)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || !strings.Contains(st.Message(), auth.ErrBadToken.Error()) {
		t.Fatalf("forward with another token: %v, want UNAVAILABLE, not sent, naming the token", err)
	}
}
