package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// digester has, with withDigest, a recurring call's action; without it, a
// deployment that lacks the action (an older build in a rolling upgrade,
// or one rolled back to).
func digester(withDigest bool) rivet.Actor[alarmState] {
	acts := rivet.Actions[alarmState]{
		"start": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().Every("digest", time.Second, "digest")
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
	}
	if withDigest {
		acts["digest"] = rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Ticks++
			return c.State.Ticks, nil
		})
	}
	return rivet.Actor[alarmState]{Name: "digester", Actions: acts}
}

// A recurring call whose action the deployed code lacks skips its runs,
// each recorded as failed, and runs again once the code has it back: it
// was deleted for good at its first run on a node without the action (a
// user trial's rolling upgrade lost a schedule so).
func TestARecurringCallOfAnActionTheCodeLacksOutlivesTheDeployment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, digester(true)), nil)
	callString(t, e.host, "digester", "d", "start", true)
	waitFor(t, "a run", 10*time.Second, func() bool { return alarmStateOf(t, e.host, "digester", "d").Ticks >= 1 })

	e.reg = counterReg(t, digester(false))
	e.restart()
	failed0 := e.host.Stats().SchedulesFailed
	waitFor(t, "two runs that fail", 20*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= failed0+2 })
	ins := inspect(t, e.host, "digester", "d")
	if len(ins.Schedules) != 1 || ins.Schedules[0].Name != "digest" || !strings.Contains(ins.Schedules[0].LastError, "the actor has no such action now") {
		t.Fatalf("calls while the code lacks the action: %+v; want the recurring call, its last run failed", ins.Schedules)
	}

	e.reg = counterReg(t, digester(true))
	e.restart()
	ticks := alarmStateOf(t, e.host, "digester", "d").Ticks
	waitFor(t, "a run once the action is back", 10*time.Second, func() bool { return alarmStateOf(t, e.host, "digester", "d").Ticks > ticks })
}
