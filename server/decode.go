package server

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A request that does not decode (a string field that is not UTF-8,
// bytes that are no protobuf) is the client's error, like any other bad
// input: INVALID_ARGUMENT with an ActorError. gRPC calls it INTERNAL, which
// says the node failed (and which the Go client treats differently), and
// writes that status as the decode fails, before any handler or
// interceptor can say otherwise. So the node's codec does not fail on a
// request of the ActorService or AdminService: it leaves the message empty
// with the error in an unknown field (undecodableField), and the first
// interceptors of ServerOptions refuse it (boundErrors, boundStreamErrors),
// before any handler or other interceptor sees it. Every other message
// (PeerService's, health) decodes as gRPC's codec does.

// undecodableField is the field number of the marker: the largest valid
// one, which no request of ours uses.
const undecodableField protowire.Number = protowire.MaxValidNumber

// undecodablePrefix starts the marker's value, so that a client's own
// unknown field of that number is not taken for one.
const undecodablePrefix = "rivet: undecodable: "

// requestCodec is gRPC's proto codec, except for requests of the client
// services (see above).
type requestCodec struct {
	encoding.CodecV2
	requests map[protoreflect.FullName]bool
}

func newRequestCodec() *requestCodec {
	c := &requestCodec{CodecV2: encoding.GetCodecV2("proto"), requests: map[protoreflect.FullName]bool{}}
	for _, sd := range []protoreflect.ServiceDescriptor{
		rivetv1.File_rivet_v1_actor_proto.Services().ByName("ActorService"),
		rivetv1.File_rivet_v1_admin_proto.Services().ByName("AdminService"),
	} {
		for i := 0; i < sd.Methods().Len(); i++ {
			c.requests[sd.Methods().Get(i).Input().FullName()] = true
		}
	}
	return c
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok || !c.requests[m.ProtoReflect().Descriptor().FullName()] {
		return err
	}
	proto.Reset(m)
	b := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(b, undecodablePrefix+err.Error()))
	return nil
}

// undecodable returns the error of a request that requestCodec could not
// decode, nil for one it could.
func undecodable(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	b := m.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == undecodableField && typ == protowire.BytesType {
			s, n := protowire.ConsumeString(b)
			if n >= 0 && strings.HasPrefix(s, undecodablePrefix) {
				st, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrInvalidArgument, "the request does not decode (%s): it must be a valid protobuf message, its strings UTF-8",
					strings.TrimPrefix(s, undecodablePrefix)))
				return st.Err()
			}
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}

// decodeStream is a server stream that refuses a received request
// requestCodec could not decode.
type decodeStream struct{ grpc.ServerStream }

func (d decodeStream) RecvMsg(m any) error {
	if err := d.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return undecodable(m)
}
