package rivet

import (
	"encoding/json"
	"errors"
	"testing"
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
