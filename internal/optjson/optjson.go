// Package optjson holds how a payload becomes the JSON a node takes: a
// create's optional input, shared by the Go client, the client an actor's
// code gets (runtime) and workflowtest's FakeClient, so that the three
// send the same input for the same value; and the client's arguments and
// bodies.
package optjson

import (
	"bytes"
	"encoding/json"

	"github.com/rivet-go/rivet"
)

// Marshal returns v as JSON, what naming it in an error: nil for none (a
// nil v, or a nil json.RawMessage), a json.RawMessage as it is (if it is
// valid JSON), and anything else marshalled. An error is
// rivet.ErrInvalidArgument.
func Marshal(what string, v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(json.RawMessage); ok && raw == nil {
		return nil, nil
	}
	return Encode(what, v)
}

// Encode returns a payload that is not optional (a call's argument, a
// message's body) as JSON, what naming it in an error: a json.RawMessage
// as it is (if it is valid JSON), anything else marshalled (nil as null).
// An error is rivet.ErrInvalidArgument, before anything is sent.
func Encode(what string, v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "%s is not valid JSON", what)
		}
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "%s does not marshal to JSON: %v", what, err)
	}
	return b, nil
}

// Canonical is body as one JSON value is written whatever its source's
// whitespace and the order of its objects' members: decoded (numbers as
// written: 1 and 1.0 differ) and encoded again, maps' keys sorted. A body
// that does not decode is itself.
func Canonical(body []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			return b
		}
	}
	return body
}

// Same reports whether a and b are the same JSON value (Canonical), as a
// node compares a keyed send's bodies and a keyed create's inputs; none
// (empty) is null.
func Same(a, b []byte) bool {
	if len(bytes.TrimSpace(a)) == 0 {
		a = []byte("null")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("null")
	}
	return bytes.Equal(Canonical(a), Canonical(b))
}
