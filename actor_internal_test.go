package rivet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A wrong argument is named as the caller counts it (from 1, as rivetctl
// and the client do) and described in JSON's terms, not Go's.
func TestAWrongArgumentIsNamedAndDescribedInJSONTerms(t *testing.T) {
	type point struct {
		X int `json:"x"`
	}
	h := Action2(func(c *ActionCtx[struct{}], n int, p point) (int, error) { return n + p.X, nil })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{`"x"`, `{"x":1}`}, `argument 1: a JSON string where an integer was expected`},
		{[]string{`1`, `{"x":"y"}`}, `argument 2: a JSON string at field x where an integer was expected`},
		{[]string{`1`, `[1]`}, `argument 2: a JSON array where an object was expected`},
		{[]string{`1.5`, `{}`}, `argument 1: the value 1.5 where an integer (no fraction or exponent) was expected`},
		{[]string{`1e400`, `{}`}, `argument 1: the value 1e400 where an integer (no fraction or exponent) was expected`},
		{[]string{`99999999999999999999`, `{}`}, `argument 1: the value 99999999999999999999 is out of range for a 64-bit integer`},
		{[]string{`1`, `{"x":1.25}`}, `argument 2: the value 1.25 at field x where an integer (no fraction or exponent) was expected`},
	} {
		raw := make([]json.RawMessage, len(tc.args))
		for i, a := range tc.args {
			raw[i] = json.RawMessage(a)
		}
		_, err := h.invoke(nil, raw)
		if !errors.Is(err, ErrInvalidArgument) || err.Error() != tc.want {
			t.Errorf("args %v: %v, want INVALID_ARGUMENT %q", tc.args, err, tc.want)
		}
	}
	if got, err := h.invoke(nil, []json.RawMessage{json.RawMessage(`2`), json.RawMessage(`{"x":3}`)}); err != nil || got != 5 {
		t.Fatalf("good arguments: %v, %v", got, err)
	}
}

// A JSON null is an argument or a message only of a type that holds it:
// encoding/json leaves any other as it was, so null reached the actor as
// the zero value ("increment by null" incremented by 0, a null reminder
// fired as "").
func TestANullIsRefusedWhereTheTypeHasNoNull(t *testing.T) {
	type point struct{ X int }
	refused := map[string]struct {
		q    QueueType
		want string
	}{
		"int":    {QueueOf[int](), "message body: a JSON null where an integer was expected (int has no null: send a value)"},
		"string": {QueueOf[string](), "message body: a JSON null where a string was expected (string has no null: send a value)"},
		"bool":   {QueueOf[bool](), "message body: a JSON null where a boolean was expected (bool has no null: send a value)"},
		"float":  {QueueOf[float64](), "message body: a JSON null where a number was expected (float64 has no null: send a value)"},
		"struct": {QueueOf[point](), "message body: a JSON null where an object was expected (rivet.point has no null: send a value)"},
		"array":  {QueueOf[[2]int](), "message body: a JSON null where an array was expected ([2]int has no null: send a value)"},
		"bytes":  {QueueOf[[4]byte](), "message body: a JSON null where a value of type [4]uint8 was expected ([4]uint8 has no null: send a value)"},
	}
	for name, tc := range refused {
		for _, body := range []string{"null", " null\n"} {
			if err := tc.q.validate(json.RawMessage(body)); !errors.Is(err, ErrInvalidArgument) || err.Error() != tc.want {
				t.Errorf("%s, body %q: %v, want INVALID_ARGUMENT %q", name, body, err, tc.want)
			}
		}
	}
	// null is a value of these: nil, or what the type's own decoder makes
	// of it.
	for name, q := range map[string]QueueType{
		"pointer":     QueueOf[*point](),
		"slice":       QueueOf[[]int](),
		"map":         QueueOf[map[string]int](),
		"interface":   QueueOf[any](),
		"raw":         QueueOf[json.RawMessage](),
		"unmarshaler": QueueOf[time.Time](),
	} {
		if err := q.validate(json.RawMessage("null")); err != nil {
			t.Errorf("%s: null refused: %v", name, err)
		}
	}
	// Arguments likewise, named by their place.
	h := Action2(func(c *ActionCtx[struct{}], n *int, p point) (int, error) { return 0, nil })
	if err := h.check([]json.RawMessage{json.RawMessage("null"), json.RawMessage("null")}); !errors.Is(err, ErrInvalidArgument) ||
		err.Error() != "argument 2: a JSON null where an object was expected (rivet.point has no null: send a value)" {
		t.Errorf("a null point: %v", err)
	}
	if err := h.check([]json.RawMessage{json.RawMessage("null"), json.RawMessage(`{"X":1}`)}); err != nil {
		t.Errorf("a null *int: %v", err)
	}
}

// fuzzArg is an argument type with fields of the kinds a message or
// argument holds, each named in an error at its field.
type fuzzArg struct {
	N     int8             `json:"n"`
	U     uint16           `json:"u,string"`
	F     float32          `json:"f"`
	S     []string         `json:"s"`
	M     map[int]bool     `json:"m"`
	T     time.Time        `json:"t"`
	B     []byte           `json:"b"`
	A     [2]byte          `json:"a"`
	P     *int64           `json:"p"`
	Inner struct{ X uint } `json:"inner"`
}

// An argument of any JSON, into a parameter of any common type, decodes
// as encoding/json decodes it, or fails with ErrInvalidArgument and a
// message; never a panic (which fails the caller's turn) and never a
// null taken as a zero value nobody sent.
func FuzzDecodeArg(f *testing.F) {
	for _, s := range []string{`1`, `null`, ` null `, `-1`, `1.5`, `1e3`, `300`, `"x"`, `[1,2]`, `{"n":300}`, `{"u":"70000"}`, `{"u":7}`,
		`{"m":{"x":true}}`, `{"t":"not a time"}`, `{"b":"!!"}`, `{"a":[1,2,3]}`, `{"inner":{"X":-1}}`, `{"f":1e100}`, `{"p":null}`, `true`,
		`18446744073709551616`, `-0`, `{"n":1e2}`} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		if !json.Valid(raw) {
			return // the node refuses it (server.checkJSON)
		}
		targets := []func() any{
			func() any { return new(int) }, func() any { return new(int8) }, func() any { return new(uint64) },
			func() any { return new(float64) }, func() any { return new(string) }, func() any { return new(bool) },
			func() any { return new([]int) }, func() any { return new(map[string]int) }, func() any { return new(fuzzArg) },
			func() any { return new(*int) }, func() any { return new(time.Time) }, func() any { return new(any) },
			func() any { return new([]byte) }, func() any { return new(json.RawMessage) },
		}
		into, want := targets[int(which)%len(targets)](), targets[int(which)%len(targets)]()
		err := decodeArg(raw, into, 0)
		wantErr := json.Unmarshal(raw, want)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(e.Message, "argument 1: ") || len(e.Message) < 20 {
				t.Fatalf("%s into %T: error %v (%T)", raw, into, err, err)
			}
			if wantErr == nil && string(bytes.TrimSpace(raw)) != "null" {
				t.Fatalf("%s into %T: refused (%v); encoding/json takes it", raw, into, err)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("%s into %T: taken; encoding/json refuses it: %v", raw, into, wantErr)
		}
		// As JSON: a time's zone decodes to a new *Location each time.
		if a, b := fmt.Sprint(json.Marshal(into)), fmt.Sprint(json.Marshal(want)); a != b {
			t.Fatalf("%s into %T: %v; encoding/json makes %v", raw, into, into, want)
		}
	})
}
