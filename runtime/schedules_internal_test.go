package runtime

import (
	"fmt"
	"testing"
)

// A recurring call's next run is the first of its runs after now: runs
// missed while no node served the actor are skipped.
func TestRecurringCallFollowing(t *testing.T) {
	c := pendingCall{at: 1000, rec: scheduleRecord{Name: "beat", EveryMs: 100}}
	for _, tc := range []struct{ now, want int64 }{{999, 1100}, {1000, 1100}, {1099, 1100}, {1100, 1200}, {1350, 1400}, {1400, 1500}} {
		n := c.following(tc.now)
		if n.at != tc.want || n.id != fmt.Sprintf("%013d-every:beat", tc.want) {
			t.Errorf("after %d: next at %d (%s), want %d", tc.now, n.at, n.id, tc.want)
		}
	}
}
