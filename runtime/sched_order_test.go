package runtime_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

type orderState struct {
	Ran []int `json:"ran"`
}

// order schedules batches of calls at a few close times.
var order = rivet.Actor[orderState]{
	Name: "order",
	Actions: rivet.Actions[orderState]{
		// plan schedules calls n..n+59, call i at at + i%3 ms.
		"plan": rivet.Action2(func(c *rivet.ActionCtx[orderState], at int64, n int) (int, error) {
			for i := n; i < n+60; i++ {
				if _, err := c.Schedule().At(time.UnixMilli(at+int64(i%3)), "rec", i); err != nil {
					return 0, err
				}
			}
			return n, nil
		}),
		"rec": rivet.Action(func(c *rivet.ActionCtx[orderState], i int) (int, error) {
			c.State.Ran = append(c.State.Ran, i)
			return i, nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[orderState]) (orderState, error) { return *c.State, nil }),
	},
}

// Many calls due at once all run, once each, in time order, and calls due
// at the same time in the order they were scheduled (Rivet's, whose
// schedule puts a call after those of its time): an action that schedules
// "charge" then "receipt" for the same moment does not get the receipt
// first.
func TestManyDueCallsRunInTimeThenSchedulingOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, order), nil)
	at := time.Now().Add(time.Second).UnixMilli()
	for n := 0; n < 180; n += 60 {
		if _, err := call(t, e.host, "order", "a", "plan", true, at, n); err != nil {
			t.Fatal(err)
		}
	}
	var want []int
	for r := range 3 {
		for i := r; i < 180; i += 3 {
			want = append(want, i)
		}
	}
	var st orderState
	waitFor(t, "every call", 30*time.Second, func() bool {
		raw, err := call(t, e.host, "order", "a", "get", false)
		if err != nil {
			t.Fatal(err)
		}
		st = orderState{}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		return len(st.Ran) >= len(want)
	})
	if !slices.Equal(st.Ran, want) {
		t.Fatalf("calls ran in the order\n%v\nwant\n%v", st.Ran, want)
	}
}
