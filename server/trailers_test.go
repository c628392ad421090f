package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// dialSmallHeaders dials addr as a client whose header list is bounded to
// 8 KiB (grpc-java's default): a status over that reaches it as a bare
// INTERNAL "stream terminated by RST_STREAM".
func dialSmallHeaders(t *testing.T, addr string) (rivetv1.ActorServiceClient, rivetv1.AdminServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithMaxHeaderListSize(8192))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rivetv1.NewActorServiceClient(conn), rivetv1.NewAdminServiceClient(conn)
}

// checkBounded fails the test unless err is a status of code, within the
// trailer budget, whose message starts as want's and says it was cut.
func checkBounded(t *testing.T, what string, err error, code codes.Code, want string) *rivet.Error {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("%s: got %v %.200q, want %v", what, st.Code(), st.Message(), code)
	}
	if n := rpcerr.TrailerSize(st); n > rpcerr.MaxTrailerBytes {
		t.Errorf("%s: %d bytes of trailers, over %d", what, n, rpcerr.MaxTrailerBytes)
	}
	e := rpcerr.FromStatus(st)
	if !utf8.ValidString(e.Message) || !strings.HasPrefix(e.Message, want[:6]) || !strings.Contains(e.Message, "... (cut: ") {
		t.Errorf("%s: message %.200q, want the start of %.20q..., cut", what, e.Message, want)
	}
	return e
}

// Every error a node sends fits a client's 8 KiB header list, cut: a
// call's, a Subscribe stream's end, an admin method's, and a status a
// handler passes on without building it (from another node, say).
func TestLongErrorsFitAnEightKiBHeaderList(t *testing.T) {
	long := strings.Repeat("ü", 50_000)
	meta := strings.Repeat("m", 100_000)
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return nil, rivet.UserError("long", long, meta)
	}
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		return servertest.NewEvents(rivet.Errorf(rivet.ErrUnavailable, "%s", long), rivet.Event{Name: "e", Data: json.RawMessage("1")}), nil
	}
	f.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		return nil, rivet.Errorf(rivet.ErrUnavailable, "%s", long)
	}
	passOn := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/Stats") {
			return nil, status.Error(codes.NotFound, long)
		}
		return handler(ctx, req)
	}
	actors, admin := dialSmallHeaders(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(passOn)}}))
	c := ctx(t)

	_, err := actors.Call(c, &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "x", Args: []byte("[]")})
	e := checkBounded(t, "Call", err, codes.Unknown, long)
	if e.Group != "user" || e.Code != "long" || len(e.Metadata) != 0 || !strings.Contains(e.Message, "(metadata of 100002 bytes left out)") {
		t.Errorf("Call: got %s.%s, metadata of %d bytes, message %.100q...; want user.long, its metadata left out", e.Group, e.Code, len(e.Metadata), e.Message)
	}

	sub, err := actors.Subscribe(c, &rivetv1.SubscribeRequest{Actor: ref("a", "k"), Events: []string{"e"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // subscribed, then the event
		if _, err := sub.Recv(); err != nil {
			t.Fatalf("Subscribe: %v before its end", err)
		}
	}
	_, err = sub.Recv()
	if e := checkBounded(t, "Subscribe", err, codes.Unavailable, long); e.Group != "actor" {
		t.Errorf("Subscribe: group %q, want actor (with its ActorError)", e.Group)
	}

	_, err = admin.Members(c, &rivetv1.MembersRequest{})
	if e := checkBounded(t, "Members", err, codes.Unavailable, long); e.Group != "actor" {
		t.Errorf("Members: group %q, want actor (with its ActorError)", e.Group)
	}

	_, err = admin.Stats(c, &rivetv1.StatsRequest{})
	checkBounded(t, "Stats", err, codes.NotFound, long)
}
