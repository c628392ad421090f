package runtime_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// The bound on actors in memory sheds actors whose OnSleep is slow as the
// idle reaper does, on goroutines of their own: one slow OnSleep held up
// the reaper (no actor went to sleep when idle meanwhile), and the shed of
// many such actors took one SleepTimeout each, one after another.
func TestShedActorsWithASlowOnSleepHoldUpNeitherTheReaperNorEachOther(t *testing.T) {
	t.Parallel()
	type st struct{}
	entered, release := make(chan string, 8), make(chan struct{})
	slow := rivet.Actor[st]{
		Name: "slowSleep",
		OnSleep: func(c *rivet.ActionCtx[st]) error {
			entered <- c.Key()[0]
			select {
			case <-release:
			case <-c.Context().Done():
			}
			return nil
		},
		Actions: rivet.Actions[st]{"touch": rivet.Action0(func(*rivet.ActionCtx[st]) (int, error) { return 0, nil })},
		Options: rivet.Options{SleepTimeout: 20 * time.Second},
	}
	// Its short idle timeout makes the reaper pass every 100 ms.
	quick := rivet.Actor[st]{Name: "quick", Options: rivet.Options{IdleTimeout: 400 * time.Millisecond},
		Actions: rivet.Actions[st]{"touch": rivet.Action0(func(*rivet.ActionCtx[st]) (int, error) { return 0, nil })}}
	e := newEnv(t, counterReg(t, slow, quick), func(c *runtime.Config) {
		c.MaxActiveActors = 2
		c.IdleTimeout = time.Hour // only the bound puts slowSleep actors to sleep
	})
	defer close(release)
	for i := range 4 {
		if _, err := call(t, e.host, "slowSleep", fmt.Sprint(i), "touch", true); err != nil {
			t.Fatal(err)
		}
	}
	// 4 actors, a bound of 2: two are shed, both OnSleeps at once.
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the bound did not shed two actors with a slow OnSleep at once")
		}
	}
	passes := e.host.ReapPasses()
	waitFor(t, "the reaper to pass while OnSleeps run", 5*time.Second, func() bool { return e.host.ReapPasses() >= passes+2 })
}
