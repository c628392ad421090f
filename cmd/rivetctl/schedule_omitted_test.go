package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// An actor with more scheduled calls' arguments than one Inspect response
// carries answers with the largest left out: schedule list and inspect say
// so, rather than showing them as calls with no arguments at all.
func TestScheduledCallsWithArgsLeftOutSaySo(t *testing.T) {
	f := servertest.NewFake()
	big := json.RawMessage(`["` + strings.Repeat("a", 60<<10) + `"]`)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		in := runtime.Inspection{Info: runtime.ActorInfo{Ref: ref}, State: json.RawMessage(`{}`)}
		for i := range 200 {
			in.Schedules = append(in.Schedules, rivet.ScheduledCall{ID: fmt.Sprint(i), Action: "later", Args: big, At: servertest.Created})
		}
		return in, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "schedule", "list", "a", "k")
	if r.code != 0 {
		t.Fatalf("schedule list: exit %d, %s", r.code, r.stderr)
	}
	blank := regexp.MustCompile(`(?m)^\S+ +\S+ +later +- `)
	if n := len(blank.FindAllString(r.stdout, -1)); n > 0 {
		t.Errorf("schedule list: %d calls shown with no arguments; want them marked as left out", n)
	}
	if !strings.Contains(r.stdout, argsLeftOut) {
		t.Errorf("schedule list: no call marked %q", argsLeftOut)
	}
	r = rivetctl(t, addr, "inspect", "a", "k")
	if r.code != 0 || !strings.Contains(r.stdout, "later "+argsLeftOut+"  (") {
		t.Errorf("inspect: exit %d, no call marked %q; stderr %s", r.code, argsLeftOut, r.stderr)
	}
}
