package errtext

import (
	"errors"
	"strings"
	"testing"
)

type ptrErr struct{ msg string }

func (e *ptrErr) Error() string { return e.msg }

func TestOf(t *testing.T) {
	if got := Of(errors.New("boom")); got != "boom" {
		t.Fatalf("Of(boom) = %q", got)
	}
	var typedNil *ptrErr
	got := Of(typedNil)
	if !strings.Contains(got, "*errtext.ptrErr") || !strings.Contains(got, "Error method panicked") {
		t.Fatalf("Of(typed nil) = %q: want it to name the type and say its Error panicked", got)
	}
}
