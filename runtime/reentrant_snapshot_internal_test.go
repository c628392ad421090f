package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rivet-go/rivet"
)

type nestState struct {
	N    int
	Blob string
}

// nestDecoded counts the decodes of nest's state (nestReg).
var nestDecoded atomic.Int64

// nestLevels is what the innermost turn of a chain found: its restore
// points, and how many distinct copies of the state they hold.
type nestLevels struct{ points, copies int }

func nestReg(t *testing.T, h **Host, found chan<- nestLevels) *rivet.Registry {
	t.Helper()
	nest := rivet.Actor[nestState]{
		Name: "nest",
		CreateState: func(json.RawMessage) (nestState, error) {
			return nestState{Blob: strings.Repeat("b", 64<<10)}, nil
		},
		Actions: rivet.Actions[nestState]{
			// down calls itself until level stop, which reports its restore
			// points and fails after a change of its own. Level set changes
			// the state before its call; level catch takes the failure of
			// its call and returns the N it then sees; level dirty changes
			// the state after its call failed, and fails too.
			"down": rivet.Action(func(c *rivet.ActionCtx[nestState], p [5]int) (int, error) {
				n, stop, set, catch, dirty := p[0], p[1], p[2], p[3], p[4]
				if n == stop {
					a := (*h).loaded(Ref{Name: "nest", Key: c.Key()})
					var l nestLevels
					seen := map[*byte]bool{}
					for rp := a.restorePoint; rp != nil; rp = rp.prev {
						l.points++
						if d := unsafe.SliceData(rp.state); !seen[d] {
							seen[d] = true
							l.copies++
						}
					}
					found <- l
					c.State.N = -1
					return 0, errors.New("innermost fails")
				}
				if n == set {
					c.State.N = n
				}
				r, err := rivet.Call[int](c.Context(), c.Client().Get("nest", c.Key()...), "down", [5]int{n + 1, stop, set, catch, dirty})
				if err != nil && n == catch {
					return c.State.N, nil
				}
				if err != nil && n == dirty {
					c.State.N = 77
				}
				return r, err
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[nestState]) (int, error) { return c.State.N, nil }),
		},
	}
	reg, err := rivet.Setup(nest)
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := reg.Lookup("nest")
	reset, decode := sp.ResetState, sp.DecodeState
	sp.ResetState = func(dst any, data []byte) error {
		nestDecoded.Add(1)
		return reset(dst, data)
	}
	sp.DecodeState = func(data []byte) (any, error) {
		nestDecoded.Add(1)
		return decode(data)
	}
	return reg
}

// The re-entrant turns of a chain that change nothing share one copy of
// the state as their restore point: a runaway self-call on an actor with a
// 900 KB state held one per level (454 MiB in a user trial), and a turn
// that changes the state before its call gives the turns nested in it a
// copy of the changed state, which a failed inner turn goes back to.
func TestReentrantTurnsShareTheirRestorePoint(t *testing.T) {
	var h *Host
	found := make(chan nestLevels, 1)
	h = memHost(t, nestReg(t, &h, found))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "nest", Key: []string{"k"}}
	call := func(p [5]int) (int, error) {
		args, _ := json.Marshal([][5]int{p})
		res, err := h.Call(ctx, CallRequest{Ref: ref, Action: "down", Args: args, CreateIfMissing: true})
		if err != nil {
			return 0, err
		}
		var n int
		return n, json.Unmarshal(res, &n)
	}

	// Nothing changes: 20 restore points, the committed state's bytes.
	// The state is decoded twice on the way back: in the innermost
	// turn, which changed it, and in the outermost, which goes back to
	// the last commit; the turns between found it as they began.
	if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "peek", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	before := nestDecoded.Load()
	if _, err := call([5]int{0, 20, -1, -1, -1}); err == nil {
		t.Fatal("the chain did not fail")
	}
	if l := <-found; l.points != 20 || l.copies != 1 {
		t.Fatalf("innermost turn found %d restore points holding %d copies of the state, want 20 holding 1", l.points, l.copies)
	}
	if n := nestDecoded.Load() - before; n != 2 {
		t.Fatalf("the state was decoded %d times on the way back from the failed chain, want 2", n)
	}

	// Level 5 changes N: the turns nested in it share a second copy,
	// and level 12 catches the failure of level 13's turn, which goes
	// back to N = 5 (not to the last commit's 0).
	n, err := call([5]int{0, 20, 5, 12, -1})
	if err != nil {
		t.Fatal(err)
	}
	if l := <-found; l.points != 20 || l.copies != 2 {
		t.Fatalf("innermost turn found %d restore points holding %d copies of the state, want 20 holding 2", l.points, l.copies)
	}
	if n != 5 {
		t.Fatalf("level 12 saw N = %d after its call failed, want 5", n)
	}
	res, err := h.Call(ctx, CallRequest{Ref: ref, Action: "peek"})
	if err != nil || string(res) != "5" {
		t.Fatalf("peek = %s, %v; want 5", res, err)
	}

	// Level 15 changes N after its call failed, and fails: its change
	// goes, back to the N = 9 that level 9 set, which level 12 sees.
	if n, err = call([5]int{0, 20, 9, 12, 15}); err != nil {
		t.Fatal(err)
	}
	<-found
	if n != 9 {
		t.Fatalf("level 12 saw N = %d after its call failed, want 9", n)
	}
}

type memoState struct {
	N      int
	Memo   string `json:"-"`
	hidden string
}

// A failed re-entrant turn that changed only what the state's JSON does
// not hold (a `json:"-"` field, an unexported one) has that change undone
// too, as a failed outermost turn has: its discard decodes the state
// again rather than take it as already back (its JSON is).
func TestAFailedReentrantTurnResetsWhatTheJSONDoesNotHold(t *testing.T) {
	memo := rivet.Actor[memoState]{
		Name: "memo",
		Actions: rivet.Actions[memoState]{
			"outer": rivet.Action0(func(c *rivet.ActionCtx[memoState]) (string, error) {
				c.State.N = 1
				c.State.Memo, c.State.hidden = "outer", "outer"
				if _, err := rivet.Call[int](c.Context(), c.Client().Get("memo", c.Key()...), "inner"); err == nil {
					return "", errors.New("inner did not fail")
				}
				return fmt.Sprintf("%d %q %q", c.State.N, c.State.Memo, c.State.hidden), nil
			}),
			"inner": rivet.Action0(func(c *rivet.ActionCtx[memoState]) (int, error) {
				c.State.Memo, c.State.hidden = "inner", "inner"
				return 0, errors.New("inner fails")
			}),
		},
	}
	reg, err := rivet.Setup(memo)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.Call(ctx, CallRequest{Ref: Ref{Name: "memo", Key: []string{"k"}}, Action: "outer", CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := json.Unmarshal(res, &got); err != nil {
		t.Fatal(err)
	}
	if want := `1 "" ""`; got != want {
		t.Fatalf("after the inner turn failed, the outer one saw %s, want %s (its JSON kept, the rest reset)", got, want)
	}
}

func TestStateWholeInJSON(t *testing.T) {
	type node struct {
		Kids []node
		At   time.Time
		Tags map[string]*int
		B    []byte
	}
	type hidden struct{ n int }
	type dash struct {
		N int `json:"-"`
	}
	type named struct {
		N int `json:"-,"`
	}
	type embeds struct{ node }
	type iface struct{ V any }
	type custom struct{ R json.RawMessage }
	for _, tc := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[*nestState](), true},
		{reflect.TypeFor[*node](), true},
		{reflect.TypeFor[*named](), true},
		{reflect.TypeFor[*hidden](), false},
		{reflect.TypeFor[*dash](), false},
		{reflect.TypeFor[*embeds](), false},
		{reflect.TypeFor[*iface](), false},
		{reflect.TypeFor[*custom](), false},
		{reflect.TypeFor[*memoState](), false},
		{nil, false},
	} {
		if got := stateWholeInJSON(tc.t); got != tc.want {
			t.Errorf("stateWholeInJSON(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}

// A commit between re-entrant turns of one chain is what the turns still
// open go back to, shared or not: level 1 (sharing the committed state's
// bytes) calls level 2, which commits N = 2, then twice level 3, which
// sets N = 3 and fails each time (both back to 2, the second one sharing
// what the first went back to), then fails itself: back to 2, not 0.
func TestReentrantTurnsGoBackToACommitBetweenThem(t *testing.T) {
	type st struct{ N, Seen int }
	var seen []int
	steps := rivet.Actor[st]{
		Name: "steps",
		Actions: rivet.Actions[st]{
			"level": rivet.Action(func(c *rivet.ActionCtx[st], level int) (int, error) {
				self := c.Client().Get("steps", c.Key()...)
				switch level {
				case 0:
					_, err := rivet.Call[int](c.Context(), self, "level", 1)
					if err == nil {
						return 0, errors.New("level 1 did not fail")
					}
					return c.State.N, nil
				case 1:
					if _, err := rivet.Call[int](c.Context(), self, "level", 2); err != nil {
						return 0, err
					}
					for range 2 {
						if _, err := rivet.Call[int](c.Context(), self, "level", 3); err == nil {
							return 0, errors.New("level 3 did not fail")
						}
						seen = append(seen, c.State.N)
					}
					c.State.N = 1
					return 0, errors.New("level 1 fails")
				case 2:
					c.State.N = 2
					return 0, nil
				default:
					c.State.N = 3
					return 0, errors.New("level 3 fails")
				}
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	}
	reg, err := rivet.Setup(steps)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "steps", Key: []string{"k"}}
	res, err := h.Call(ctx, CallRequest{Ref: ref, Action: "level", Args: json.RawMessage(`[0]`), CreateIfMissing: true})
	if err != nil || string(res) != "2" {
		t.Fatalf("level 0 = %s, %v; want 2 (level 2's commit)", res, err)
	}
	if fmt.Sprint(seen) != "[2 2]" {
		t.Fatalf("level 1 saw N = %v after each failed level 3, want [2 2]", seen)
	}
	if res, err = h.Call(ctx, CallRequest{Ref: ref, Action: "peek"}); err != nil || string(res) != "2" {
		t.Fatalf("peek = %s, %v; want 2", res, err)
	}
}
