package rpcerr

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/textcut"
)

// A status travels in HTTP/2 trailers: grpc-message (the message,
// percent-encoded) and grpc-status-details-bin (the whole status, message
// and details, base64-encoded). A client refuses a header list over its
// bound (8 KiB for grpc-java, about that for C-core, set with
// grpc.WithMaxHeaderListSize in Go) and gets only "stream terminated by
// RST_STREAM", its code and detail lost. So every status a node sends is
// bounded to fit, with room to spare for the other headers.
const (
	// MaxTrailerBytes is the most a status a node sends takes in
	// trailers (grpc-message and grpc-status-details-bin, as encoded).
	MaxTrailerBytes = 4 << 10
	// MaxMessageBytes is the most a cut status message takes
	// percent-encoded (a non-ASCII byte takes three), its mark of the
	// cut included.
	MaxMessageBytes = 1 << 10
	// maxNameBytes bounds an ActorError's group and code, names that
	// never need more.
	maxNameBytes = 128
)

// TrailerSize is what st takes in trailers: its message percent-encoded
// (grpc-message) plus the status base64-encoded (grpc-status-details-bin,
// sent when it has details).
func TrailerSize(st *status.Status) int {
	p := st.Proto()
	n := encodedLen(p.GetMessage())
	if len(p.GetDetails()) > 0 {
		n += (proto.Size(p) + 2) / 3 * 4
	}
	return n
}

// Bound returns st if it fits MaxTrailerBytes, otherwise st cut to fit,
// its code, ActorError group and code, and other small details intact:
//   - the message cut (on a character boundary) to MaxMessageBytes
//     percent-encoded, saying how long it was;
//   - the ActorError's message left empty (FromStatus reads the status
//     message then), rather than sent twice;
//   - the ActorError's metadata left out if the status still does not
//     fit, which the message says;
//   - a group or code longer than any name, cut, and then details other
//     than the ActorError (and the mark of an outcome unknown) left out,
//     if it still does not fit.
//
// Every status a node sends for the wire goes through it: ToStatus calls
// it, and the server's interceptors apply it to whatever else a handler
// returns (a status passed on from another node, gRPC's own).
func Bound(st *status.Status) *status.Status {
	if st == nil || TrailerSize(st) <= MaxTrailerBytes {
		return st
	}
	p := proto.Clone(st.Proto()).(*spb.Status)
	full := p.GetMessage()
	p.Message = cutMessage(full, "")
	var ae *rivetv1.ActorError
	aeAt := -1
	for i, d := range p.GetDetails() {
		m := new(rivetv1.ActorError)
		if d.MessageIs(m) && d.UnmarshalTo(m) == nil {
			ae, aeAt = m, i
			break
		}
	}
	if ae == nil {
		if out := status.FromProto(p); TrailerSize(out) <= MaxTrailerBytes {
			return out
		}
		// Its other details go, but not the mark of an outcome unknown:
		// without any detail, a dial error's text would read as a
		// request never sent (NotSent), retried even with side effects.
		p.Details = outcomeMarks(p.Details)
		return status.FromProto(p)
	}
	if ae.GetMessage() == full {
		ae.Message = ""
	} else {
		ae.Message = cutMessage(ae.GetMessage(), "")
	}
	put := func() *status.Status {
		p.Details[aeAt].Value, _ = proto.Marshal(ae)
		return status.FromProto(p)
	}
	if out := put(); TrailerSize(out) <= MaxTrailerBytes {
		return out
	}
	if n := len(ae.GetMetadata()); n > 0 {
		ae.Metadata = nil
		p.Message = cutMessage(full, fmt.Sprintf(" (metadata of %d bytes left out)", n))
		if out := put(); TrailerSize(out) <= MaxTrailerBytes {
			return out
		}
	}
	ae.Group, ae.Code = textcut.Prefix(ae.GetGroup(), maxNameBytes), textcut.Prefix(ae.GetCode(), maxNameBytes)
	if out := put(); TrailerSize(out) <= MaxTrailerBytes {
		return out
	}
	p.Details = append([]*anypb.Any{p.Details[aeAt]}, outcomeMarks(p.Details)...)
	aeAt = 0
	return put()
}

// outcomeMarks is the outcome-unknown marks among details (small: an
// ErrorInfo of a reason and domain).
func outcomeMarks(details []*anypb.Any) []*anypb.Any {
	var out []*anypb.Any
	for _, d := range details {
		ei := new(errdetails.ErrorInfo)
		if d.MessageIs(ei) && d.UnmarshalTo(ei) == nil && ei.GetReason() == OutcomeUnknownReason {
			out = append(out, d)
		}
	}
	return out
}

// cutMessage is msg, cut to fit MaxMessageBytes percent-encoded with a
// mark of the cut and note after it, or msg itself (and note) if it fits.
func cutMessage(msg, note string) string {
	if encodedLen(msg)+encodedLen(note) <= MaxMessageBytes {
		return msg + note
	}
	mark := fmt.Sprintf("... (cut: %d bytes in all)", len(msg)) + note
	room := MaxMessageBytes - encodedLen(mark)
	i, n := 0, 0
	for ; i < len(msg); i++ {
		n += encodedByteLen(msg[i])
		if n > room {
			break
		}
	}
	return textcut.Prefix(msg, i) + mark
}

// encodedLen is the length of s percent-encoded as grpc-message is: every
// byte outside printable ASCII, and '%', takes three.
func encodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n += encodedByteLen(s[i])
	}
	return n
}

func encodedByteLen(c byte) int {
	if c >= ' ' && c <= '~' && c != '%' {
		return 1
	}
	return 3
}
