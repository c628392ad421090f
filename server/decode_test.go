package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// rawCodec sends requests given as bytes as they are, so that a test can
// send what the protobuf library refuses to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// actorRefBytes is a request whose field 1 is an ActorRef named name (not
// necessarily UTF-8) with key ["k"]: CallRequest's and SubscribeRequest's
// layout alike.
func actorRefBytes(name string) []byte {
	var ref []byte
	ref = protowire.AppendTag(ref, 1, protowire.BytesType)
	ref = protowire.AppendString(ref, name)
	ref = protowire.AppendTag(ref, 2, protowire.BytesType)
	ref = protowire.AppendString(ref, "k")
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	return protowire.AppendBytes(req, ref)
}

// A request that does not decode (here an actor name that is not UTF-8,
// which proto3 strings must be) is the client's error: INVALID_ARGUMENT
// with an ActorError, on a unary call and on a stream, not gRPC's
// INTERNAL, which says the node failed.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	f := servertest.NewFake()
	calls := 0
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		calls++
		return json.RawMessage("1"), nil
	}
	conn, err := grpc.NewClient(servertest.Start(t, f, servertest.Config{}),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	// The same bytes with a valid name are served: the encoding is right.
	var resp rivetv1.CallResponse
	valid := append(actorRefBytes("counter"), protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "get")...)
	if err := conn.Invoke(ctx(t), rivetv1.ActorService_Call_FullMethodName, valid, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	bad := append(actorRefBytes("c\xffounter"), protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "get")...)
	err = conn.Invoke(ctx(t), rivetv1.ActorService_Call_FullMethodName, bad, &resp, grpc.ForceCodec(rawCodec{}))
	st, ae := detail(t, err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "does not decode") || ae.Message != st.Message() {
		t.Errorf("unary: got %v %q, want INVALID_ARGUMENT saying the request does not decode", st.Code(), st.Message())
	}
	if calls != 1 {
		t.Errorf("backend saw %d calls, want the valid one only", calls)
	}

	desc := &grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true}
	s, err := conn.NewStream(ctx(t), desc, rivetv1.ActorService_Subscribe_FullMethodName, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(actorRefBytes("c\xffounter")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	err = s.RecvMsg(new(rivetv1.SubscribeResponse))
	st, _ = detail(t, err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "does not decode") {
		t.Errorf("stream: got %v %q, want INVALID_ARGUMENT saying the request does not decode", st.Code(), st.Message())
	}
}
