package rpcerr_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/textcut"
)

// A status of any size fits the trailer budget once bounded, keeping its
// code, its ActorError's group and code, the start of its message (cut on
// a character, saying so) and its metadata if it still fits.
func TestBoundFitsTheTrailerBudget(t *testing.T) {
	for _, c := range []struct {
		name      string
		msg       string
		meta      int
		keepsMeta bool
	}{
		{"ascii", strings.Repeat("e", 100_000), 100_000, false},
		{"two-byte", strings.Repeat("é", 50_000), 100_000, false},
		{"three-byte", strings.Repeat("日", 30_000), 0, true},
		{"percent", strings.Repeat("%", 100_000), 600, true},
		{"ascii, small metadata", strings.Repeat("e", 100_000), 600, true},
		{"short, large metadata", "short", 100_000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := rivet.UserError("long", c.msg, strings.Repeat("m", c.meta))
			if c.meta == 0 {
				e.Metadata = nil
			}
			st, _ := rpcerr.ToStatus(e)
			n := rpcerr.TrailerSize(st)
			if n > rpcerr.MaxTrailerBytes {
				t.Fatalf("%d bytes of trailers, over %d", n, rpcerr.MaxTrailerBytes)
			}
			t.Logf("%d-byte message, %d-byte metadata: %d bytes of trailers", len(c.msg), len(e.Metadata), n)
			if st.Code() != codes.Unknown {
				t.Errorf("code %v, want Unknown", st.Code())
			}
			got := rpcerr.FromStatus(st)
			if got.Group != "user" || got.Code != "long" {
				t.Errorf("got %s.%s, want user.long", got.Group, got.Code)
			}
			msg := got.Message
			if !utf8.ValidString(msg) || !strings.HasPrefix(c.msg, msg[:min(len(msg), 4)]) {
				t.Errorf("message %.100q: not the start of the actor's", msg)
			}
			if len(c.msg) > 1000 && !strings.Contains(msg, fmt.Sprintf("... (cut: %d bytes in all)", len(c.msg))) {
				t.Errorf("message %.100q...: does not say it was cut", msg)
			}
			if c.keepsMeta != (len(got.Metadata) == len(e.Metadata)) {
				t.Errorf("metadata of %d bytes after the cut, of %d; want it kept: %v", len(got.Metadata), len(e.Metadata), c.keepsMeta)
			}
			if !c.keepsMeta && !strings.Contains(msg, fmt.Sprintf("(metadata of %d bytes left out)", len(e.Metadata))) {
				t.Errorf("message %.100q...: does not say the metadata was left out", msg)
			}
			if n := len(msg); n > rpcerr.MaxMessageBytes+100 {
				t.Errorf("message of %d bytes", n)
			}
		})
	}
}

// A status that fits goes as it is: its ActorError repeats its message.
func TestBoundLeavesASmallStatus(t *testing.T) {
	st, _ := rpcerr.ToStatus(rivet.UserError("c", strings.Repeat("x", 900), map[string]int{"a": 1}))
	if b := rpcerr.Bound(st); b != st {
		t.Fatalf("Bound changed a status that fits")
	}
	for _, d := range st.Details() {
		if ae, ok := d.(*rivetv1.ActorError); ok && ae.GetMessage() != st.Message() {
			t.Errorf("ActorError message %q, want the status message", ae.GetMessage())
		}
	}
}

// A status without an ActorError (passed on from elsewhere, or marked
// outcome unknown) is cut too, and keeps its small details.
func TestBoundCutsAStatusWithoutActorError(t *testing.T) {
	st, _ := rpcerr.ToStatus(&rivet.Error{Kind: rivet.ErrUnavailable, Message: strings.Repeat("ü", 10_000)})
	if n := rpcerr.TrailerSize(st); n > rpcerr.MaxTrailerBytes {
		t.Fatalf("%d bytes of trailers, over %d", n, rpcerr.MaxTrailerBytes)
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v, want the outcome-unknown mark", st.Details())
	}
	if ei, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || ei.GetReason() != rpcerr.OutcomeUnknownReason {
		t.Errorf("detail %v, want the outcome-unknown mark", st.Details()[0])
	}
	bare := rpcerr.Bound(status.New(codes.NotFound, strings.Repeat("k", 1<<20)))
	if bare.Code() != codes.NotFound || rpcerr.TrailerSize(bare) > rpcerr.MaxMessageBytes || !strings.HasSuffix(bare.Message(), "(cut: 1048576 bytes in all)") {
		t.Errorf("got %v %.100q...", bare.Code(), bare.Message())
	}
}

// An error of any text (the actor's own: any bytes, any length, a group
// or code of any size, metadata of any size) becomes a status that fits
// the trailer budget, with the code of its kind, whose message is UTF-8
// and starts as the error's (cut on a character), and from which the
// client reads back the group and code (the start of them, if past any
// name's length) and the metadata if it was kept whole. A status over
// the budget is one a client never sees (RST_STREAM).
func FuzzToStatus(f *testing.F) {
	f.Add(uint8(0), "user", "long", "é", 50_000, "m", 100_000)
	f.Add(uint8(1), "g\xff", "c", "%\xff", 2000, "", 0)
	f.Add(uint8(2), strings.Repeat("g", 300), strings.Repeat("日", 100), "x", 10, "{}", 1)
	f.Add(uint8(3), "", "", "a\xe6\x97", 1500, "1", 3000)
	f.Add(uint8(0), "user", "c", "short", 5, "m", 5000)
	kinds := []error{rivet.ErrUser, rivet.ErrNotFound, rivet.ErrInvalidArgument, rivet.ErrUnavailable, rivet.ErrTooLarge, rivet.ErrWorkflowFailed, rivet.ErrInternal}
	f.Fuzz(func(t *testing.T, kind uint8, group, code, piece string, n int, meta string, m int) {
		n, m = max(n, -n)%60_000, max(m, -m)%120_000
		if n < 0 || m < 0 { // the least int
			return
		}
		e := &rivet.Error{Kind: kinds[int(kind)%len(kinds)], Group: group, Code: code, Message: strings.Repeat(piece, n/max(1, len(piece)))}
		if meta != "" {
			e.Metadata = []byte(strings.Repeat(meta, m/len(meta)))
		}
		st, _ := rpcerr.ToStatus(e)
		if size := rpcerr.TrailerSize(st); size > rpcerr.MaxTrailerBytes {
			t.Fatalf("%d bytes of trailers, over %d", size, rpcerr.MaxTrailerBytes)
		}
		if st.Code() != rpcerr.Code(e.Kind) {
			t.Fatalf("code %v, want %v", st.Code(), rpcerr.Code(e.Kind))
		}
		msg := st.Message()
		want := textcut.Valid(e.Message)
		if !utf8.ValidString(msg) || msg != want && !strings.HasPrefix(want, uncut(msg)) {
			t.Fatalf("message %.200q of %.200q", msg, e.Message)
		}
		got := rpcerr.FromStatus(st)
		if e.Kind == rivet.ErrUnavailable && e.Group == "" {
			return // no ActorError: see toStatus
		}
		if g := textcut.Valid(e.Group); got.Group != g && (len(got.Group) < 100 || !strings.HasPrefix(g, got.Group)) {
			t.Fatalf("group %.200q read back as %.200q", e.Group, got.Group)
		}
		if c := textcut.Valid(e.Code); got.Code != c && (len(got.Code) < 100 || !strings.HasPrefix(c, got.Code)) {
			t.Fatalf("code %.200q read back as %.200q", e.Code, got.Code)
		}
		if len(got.Metadata) > 0 && string(got.Metadata) != string(e.Metadata) {
			t.Fatalf("metadata changed: %.100q to %.100q", e.Metadata, got.Metadata)
		}
		if !strings.HasPrefix(textcut.Valid(e.Message), uncut(got.Message)) {
			t.Fatalf("message %.200q read back as %.200q", e.Message, got.Message)
		}
	})
}

// uncut is msg without what a cut adds: its mark, and the note of
// metadata left out.
func uncut(msg string) string {
	msg, _, _ = strings.Cut(msg, "... (cut: ")
	msg, _, _ = strings.Cut(msg, " (metadata of ")
	return msg
}
