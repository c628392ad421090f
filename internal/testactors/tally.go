package testactors

import (
	"fmt"
	"time"

	"github.com/rivet-go/rivet"
)

// TallyState is a Tally's state: the runs of each one-off call by tag,
// the due times of the recurring one's runs, and the pokes it took.
type TallyState struct {
	Hits  map[string]int `json:"hits"`
	Beats []int64        `json:"beats"` // the due times of the recurring runs
	Pokes int            `json:"pokes"`
}

// Tally schedules one-off calls and a recurring one, and records each
// run: the actor of the timer tests across moves (runtime's and node's).
var Tally = rivet.Actor[TallyState]{
	Name: "tally",
	Actions: rivet.Actions[TallyState]{
		"plan": rivet.Action2(func(c *rivet.ActionCtx[TallyState], n, spacingMs int) (int, error) {
			for i := range n {
				if _, err := c.Schedule().After(300*time.Millisecond+time.Duration(i*spacingMs)*time.Millisecond, "hit", fmt.Sprintf("c%d", i)); err != nil {
					return 0, err
				}
			}
			if _, err := c.Schedule().Every("beat", time.Second, "beat"); err != nil {
				return 0, err
			}
			return n, nil
		}),
		"hit": rivet.Action(func(c *rivet.ActionCtx[TallyState], tag string) (int, error) {
			if c.State.Hits == nil {
				c.State.Hits = map[string]int{}
			}
			c.State.Hits[tag]++
			return c.State.Hits[tag], nil
		}),
		"beat": rivet.Action0(func(c *rivet.ActionCtx[TallyState]) (int, error) {
			f, _ := c.Fired()
			c.State.Beats = append(c.State.Beats, f.At.UnixMilli())
			return len(c.State.Beats), nil
		}),
		"poke": rivet.Action0(func(c *rivet.ActionCtx[TallyState]) (int, error) {
			c.State.Pokes++
			return c.State.Pokes, nil
		}),
		// planIDs schedules n one-off calls, spacingMs apart from 300 ms
		// on, and returns their ids.
		"planIDs": rivet.Action2(func(c *rivet.ActionCtx[TallyState], n, spacingMs int) ([]string, error) {
			var ids []string
			for i := range n {
				id, err := c.Schedule().After(300*time.Millisecond+time.Duration(i*spacingMs)*time.Millisecond, "hit", fmt.Sprintf("c%d", i))
				if err != nil {
					return nil, err
				}
				ids = append(ids, id)
			}
			return ids, nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[TallyState]) (TallyState, error) { return *c.State, nil }),
	},
}
