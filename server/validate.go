package server

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/ijson"
	"github.com/rivet-go/rivet/runtime"
)

// The checks here run in the service's handlers, on the node that serves
// the actor: a node that forwards a request passes it on as it came (its
// forwarding interceptor runs before the handler), so a malformed request
// may cost a hop, but never an etcd read. The runtime checks again what only
// it can know (that an action exists, that a body fits a queue's type).

// ref checks an actor reference and converts it.
func ref(a *rivetv1.ActorRef) (runtime.Ref, error) {
	if err := rivet.ValidateName("actor name", a.GetName()); err != nil {
		return runtime.Ref{}, err
	}
	if err := rivet.ValidateKey(a.GetKey()); err != nil {
		return runtime.Ref{}, err
	}
	return runtime.Ref{Name: a.GetName(), Key: a.GetKey()}, nil
}

// args checks an action's arguments: a JSON array within the limit. Empty
// means no arguments.
func (s *Server) args(b []byte) (json.RawMessage, error) {
	if len(b) == 0 {
		return json.RawMessage("[]"), nil
	}
	if err := checkSize("action arguments", len(b), s.limits.MaxArgsBytes); err != nil {
		return nil, err
	}
	if err := checkJSON("action arguments", "are", b); err != nil {
		return nil, err
	}
	if firstByte(b) != '[' {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "action arguments must be a JSON array, such as [5] or [], not %s", jsonKind(b))
	}
	return b, nil
}

// body checks a queue message: JSON within the limit. An empty body is not
// JSON; a client that means "nothing" sends null.
func (s *Server) body(b []byte) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "message body is empty: send JSON (null for none)")
	}
	if err := checkSize("message body", len(b), s.limits.MaxMessageBytes); err != nil {
		return nil, err
	}
	if err := checkJSON("message body", "is", b); err != nil {
		return nil, err
	}
	return b, nil
}

// input checks a create input: JSON within the limit, or empty for none.
func (s *Server) input(b []byte) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if err := checkSize("create input", len(b), s.limits.MaxInputBytes); err != nil {
		return nil, err
	}
	if err := checkJSON("create input", "is", b); err != nil {
		return nil, err
	}
	return b, nil
}

// checkJSON refuses a payload that is not JSON, or not UTF-8: JSON
// exchanged between systems is UTF-8 (RFC 8259), and encoding/json, which
// takes other bytes in strings as valid, turns each into U+FFFD when an
// action decodes them: text changed without a word. So does
// encoding/json with a lone surrogate's escape ("\ud800").
func checkJSON(what, is string, b []byte) error {
	if !json.Valid(b) {
		return notJSON(what, is, b)
	}
	if !utf8.Valid(b) {
		at := 0
		for at < len(b) {
			r, n := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			at += n
		}
		return rivet.Errorf(rivet.ErrInvalidArgument, "%s %s not valid UTF-8 (at byte %d): JSON text must be UTF-8", what, is, at)
	}
	// An escaped lone surrogate changes the same way (valid JSON all the
	// same); I-JSON, the JSON meant for exchange, forbids it.
	if at, esc := ijson.LoneSurrogate(b); at >= 0 {
		return rivet.Errorf(rivet.ErrInvalidArgument, "%s %s %s", what, is, ijson.LoneSurrogateText(esc, at))
	}
	return nil
}

// maxJSONDepth is how deep encoding/json nests arrays and objects.
const maxJSONDepth = 10000

// notJSON is the error of a payload json.Valid refused, saying why and
// where: "not valid JSON" alone left the user of a large payload to find
// the fault, and misnamed one nested deeper than encoding/json takes,
// which is JSON all the same. It runs only for a refused payload.
func notJSON(what, is string, b []byte) error {
	var se *json.SyntaxError
	if !errors.As(json.Unmarshal(b, &struct{}{}), &se) {
		return rivet.Errorf(rivet.ErrInvalidArgument, "%s %s not valid JSON", what, is)
	}
	if strings.HasSuffix(se.Error(), "exceeded max depth") {
		return rivet.Errorf(rivet.ErrInvalidArgument, "%s: arrays and objects nested deeper than the limit of %d levels (at byte %d)", what, maxJSONDepth, se.Offset)
	}
	return rivet.Errorf(rivet.ErrInvalidArgument, "%s %s not valid JSON: %s at byte %d", what, is, se.Error(), se.Offset)
}

// firstByte returns the first byte of JSON that is not white space.
func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// jsonKind names the kind of a valid JSON value, for error messages.
func jsonKind(b []byte) string {
	switch c := firstByte(b); {
	case c == '{':
		return "an object"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}
