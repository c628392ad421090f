package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A payload (action arguments, a message body, a create input) of any
// bytes is taken as it is or refused with INVALID_ARGUMENT (or
// RESOURCE_EXHAUSTED past its limit), never a panic; one taken is JSON
// that encoding/json decodes without changing its text (UTF-8, no lone
// surrogate), and arguments taken are an array, as the runtime reads
// them.
func FuzzPayloadChecks(f *testing.F) {
	for _, s := range []string{``, `[]`, `[5]`, ` [1, "a"] `, `{"a":1}`, `"\ud800"`, "\"\xff\"", `[`, `[1] [2]`, `null`, "\ufeff[]",
		`["\ud83d\ude00"]`, `"\\ud800"`, `[[[[[[[[[[`, `1e999`, `-`, "[\"\u2028\"]"} {
		f.Add([]byte(s))
	}
	s := &Server{limits: Limits{MaxArgsBytes: 64, MaxMessageBytes: 64, MaxInputBytes: 64}.withDefaults()}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []struct {
			what  string
			check func([]byte) (json.RawMessage, error)
		}{{"args", s.args}, {"body", s.body}, {"input", s.input}} {
			out, err := c.check(b)
			if err != nil {
				var re *rivet.Error
				st, _ := rpcerr.ToStatus(err)
				if !errors.As(err, &re) || st.Code() != codes.InvalidArgument && st.Code() != codes.ResourceExhausted {
					t.Fatalf("%s %q: error %v (%T), status %v", c.what, b, err, err, st.Code())
				}
				continue
			}
			if len(out) == 0 {
				if len(b) != 0 || c.what != "input" {
					t.Fatalf("%s %q taken as nothing", c.what, b)
				}
				continue
			}
			if !json.Valid(out) || (len(b) > 0 && !bytes.Equal(out, b)) {
				t.Fatalf("%s %q taken as %q", c.what, b, out)
			}
			// As numbers: 1e999 is JSON, which a float64 does not hold
			// (the runtime refuses it for an argument or a body of a type
			// that does not).
			var v any
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s %q taken, but does not decode: %v", c.what, b, err)
			}
			if c.what == "args" {
				var a []json.RawMessage
				if err := json.Unmarshal(out, &a); err != nil {
					t.Fatalf("args %q taken, but not an array: %v", b, err)
				}
			}
		}
	})
}

// A request of any bytes either decodes as proto decodes it, or is
// refused with INVALID_ARGUMENT by the interceptors (undecodable), never
// gRPC's INTERNAL, which says the node failed.
func FuzzRequestCodec(f *testing.F) {
	ok, _ := proto.Marshal(&rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: []byte("[5]")})
	f.Add(ok)
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff})
	f.Add([]byte{0xff})
	f.Add([]byte{})
	c := newRequestCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var m rivetv1.CallRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &m); err != nil {
			t.Fatalf("codec error %v for a client request", err)
		}
		err := undecodable(&m)
		var direct rivetv1.CallRequest
		if perr := proto.Unmarshal(data, &direct); perr == nil {
			if err != nil && !bytes.Contains(data, []byte(undecodablePrefix)) {
				t.Fatalf("%x decodes, but is refused: %v", data, err)
			}
			if err == nil && !proto.Equal(&m, &direct) {
				t.Fatalf("%x decodes as %v, the codec made %v", data, &direct, &m)
			}
			return
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%x does not decode, but the codec's request gets %v", data, err)
		}
	})
}
