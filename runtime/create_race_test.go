package runtime_test

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// Many Create and GetOrCreate of one key at once create the actor once:
// CreateState and OnWake run once, exactly one of them says it created it,
// and every other Create gets ErrAlreadyExists.
func TestConcurrentCreatesOfOneKeyCreateItOnce(t *testing.T) {
	t.Parallel()
	type st struct{ N int }
	var creates, wakes atomic.Int64
	a := rivet.Actor[st]{
		Name:        "race",
		CreateState: func(json.RawMessage) (st, error) { creates.Add(1); return st{N: 1}, nil },
		OnWake:      func(*rivet.ActionCtx[st]) error { wakes.Add(1); return nil },
		Actions:     rivet.Actions[st]{"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil })},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "race", Key: []string{"k"}}
	var created atomic.Int64
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_, c, err := e.host.GetOrCreate(ctx(t), ref, nil)
				if err != nil {
					t.Errorf("GetOrCreate: %v", err)
				} else if c {
					created.Add(1)
				}
				return
			}
			_, err := e.host.Create(ctx(t), ref, nil)
			if err == nil {
				created.Add(1)
			} else if !errors.Is(err, rivet.ErrAlreadyExists) {
				t.Errorf("Create: %v, want nil or ErrAlreadyExists", err)
			}
		}()
	}
	wg.Wait()
	if creates.Load() != 1 || wakes.Load() != 1 || created.Load() != 1 {
		t.Fatalf("CreateState ran %d times, OnWake %d, %d callers created the actor; want 1 each", creates.Load(), wakes.Load(), created.Load())
	}
}
