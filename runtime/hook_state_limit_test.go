package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
)

type bloaterState struct {
	Blob string `json:"blob"`
}

var bloats atomic.Bool

// bloater's OnWake grows its state past the limit while bloats is set.
var bloater = rivet.Actor[bloaterState]{
	Name: "bloater",
	OnWake: func(c *rivet.ActionCtx[bloaterState]) error {
		if bloats.Load() {
			c.State.Blob = strings.Repeat("x", 4<<10)
		}
		return nil
	},
	Actions: rivet.Actions[bloaterState]{
		"len": rivet.Query(func(c *rivet.ActionCtx[bloaterState]) (int, error) { return len(c.State.Blob), nil }),
	},
}

// A hook that leaves the state over its limit fails as any hook's failure
// does (INTERNAL, with the message that says so), not RESOURCE_EXHAUSTED:
// that says, to the caller, that its own request was too large, and what
// it asked was not.
func TestAHookThatMakesTheStateTooLargeIsInternal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, bloater), func(c *runtime.Config) { c.MaxStateBytes = 1 << 10 })
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("%s: err = %v, want ErrInternal", what, err)
		}
		if st, _ := rpcerr.ToStatus(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "the limit is 1024") {
			t.Fatalf("%s: status %v, want INTERNAL naming the limit", what, st)
		}
	}
	ref := runtime.Ref{Name: "bloater", Key: []string{"b"}}
	bloats.Store(true)
	defer bloats.Store(false)
	_, err := e.host.Create(ctx(t), ref, nil)
	check("create", err)
	bloats.Store(false)
	if n := callInt(t, e.host, "bloater", "b", "len", true); n != 0 {
		t.Fatalf("len %d, want 0", n)
	}
	e.restart()
	bloats.Store(true)
	_, err = call(t, e.host, "bloater", "b", "len", false)
	check("wake", err)
}
