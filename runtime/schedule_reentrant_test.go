package runtime_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type revState struct {
	Ticks  int  `json:"ticks"`
	Cancel bool `json:"cancel"` // what the re-entrant Cancel said
}

// rev exercises re-entrant turns around recurring calls.
var rev = rivet.Actor[revState]{
	Name: "rev",
	Actions: rivet.Actions[revState]{
		"add":  rivet.Action(func(c *rivet.ActionCtx[revState], n int) (int, error) { return n, nil }),
		"take": rivet.Action(func(c *rivet.ActionCtx[revState], s string) (int, error) { return len(s), nil }),
		"every": rivet.Action2(func(c *rivet.ActionCtx[revState], name string, ms int64) (string, error) {
			return c.Schedule().Every(name, time.Duration(ms)*time.Millisecond, "add", 1)
		}),
		"cancel": rivet.Action(func(c *rivet.ActionCtx[revState], id string) (bool, error) {
			ok, err := c.Schedule().Cancel(id)
			c.State.Cancel = ok
			return ok, err
		}),
		// Every(name), then a re-entrant turn names it again.
		"everyThenReenter": rivet.Action(func(c *rivet.ActionCtx[revState], name string) (bool, error) {
			if _, err := c.Schedule().Every(name, time.Hour, "add", 1); err != nil {
				return false, err
			}
			_, err := c.Client().Get("rev", c.Key()...).Call(c.Context(), "every", name, int64(2*time.Hour/time.Millisecond))
			return err == nil, err
		}),
		// A recurring run that, through a re-entrant turn, replaces or
		// cancels its own call.
		"beat": rivet.Action(func(c *rivet.ActionCtx[revState], how string) (int, error) {
			c.State.Ticks++
			f, ok := c.Fired()
			if !ok {
				return 0, nil
			}
			self := c.Client().Get("rev", c.Key()...)
			var err error
			if how == "replace" {
				_, err = self.Call(c.Context(), "every", f.Name, int64(time.Hour/time.Millisecond))
			} else {
				_, err = self.Call(c.Context(), "cancel", f.ID)
			}
			return c.State.Ticks, err
		}),
		"startBeat": rivet.Action(func(c *rivet.ActionCtx[revState], how string) (string, error) {
			return c.Schedule().Every("b", time.Second, "beat", how)
		}),
		// A refused Every must not free the replaced call's bytes.
		"bytes": rivet.Action0(func(c *rivet.ActionCtx[revState]) (int, error) {
			big := strings.Repeat("x", 60<<10)
			if _, err := c.Schedule().Every("x", time.Hour, "take", big); err != nil {
				return 0, err
			}
			if _, err := c.Schedule().Every("x", time.Hour, "nope"); err == nil {
				return 0, errors.New("a bad Every was accepted")
			}
			for i := range 4 {
				if _, err := c.Schedule().After(time.Hour, "take", big); err != nil {
					return i, err
				}
			}
			return 4, nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[revState]) (revState, error) { return *c.State, nil }),
	},
}

func schedIDs(t *testing.T, h *runtime.Host, key string) []string {
	var ids []string
	for _, s := range inspect(t, h, "rev", key).Schedules {
		ids = append(ids, s.ID)
	}
	return ids
}

// Naming a recurring call again replaces it, also from a re-entrant turn.
func TestAReentrantEveryReplacesTheOuterTurns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, rev), nil)
	if _, err := call(t, e.host, "rev", "a", "everyThenReenter", true, "x"); err != nil {
		t.Fatal(err)
	}
	if ids := schedIDs(t, e.host, "a"); len(ids) != 1 {
		t.Fatalf("stored %v: want one call of every:x", ids)
	}
}

// A fired recurring run that replaces its own call through a re-entrant
// turn leaves one call of the name.
func TestARecurringRunReplacesItsCallReentrantly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, rev), nil)
	callString(t, e.host, "rev", "b", "startBeat", true, "replace")
	waitFor(t, "a run", 10*time.Second, func() bool { return e.host.Stats().SchedulesFired >= 1 })
	waitFor(t, "the run stored", 10*time.Second, func() bool {
		for _, s := range inspect(t, e.host, "rev", "b").Schedules {
			if s.Every == time.Hour {
				return true
			}
		}
		return false
	})
	if ids := schedIDs(t, e.host, "b"); len(ids) != 1 {
		t.Fatalf("stored %v: want one call of every:b", inspect(t, e.host, "rev", "b").Schedules)
	}
}

// A fired recurring run that cancels its own call through a re-entrant
// turn stops it.
func TestARecurringRunCancelsItsCallReentrantly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, rev), nil)
	callString(t, e.host, "rev", "c", "startBeat", true, "cancel")
	// Counted once durable, with the re-entrant cancel before it.
	waitFor(t, "a run", 10*time.Second, func() bool { return e.host.Stats().SchedulesFired >= 1 })
	if ids := schedIDs(t, e.host, "c"); len(ids) != 0 {
		raw, _ := call(t, e.host, "rev", "c", "get", false)
		t.Fatalf("stored %v after the run cancelled it (state %s)", ids, raw)
	}
}

// A turn's arguments stay within its byte budget after a refused Every.
func TestARefusedEveryKeepsTheTurnsByteBudget(t *testing.T) {
	e := newEnv(t, counterReg(t, rev), nil)
	n, err := call(t, e.host, "rev", "d", "bytes", true)
	if !errors.Is(err, rivet.ErrTooLarge) {
		t.Fatalf("5 x 60 KiB in one turn: %s %v, want too large", n, err)
	}
}
