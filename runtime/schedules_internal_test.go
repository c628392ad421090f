package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/rivet-go/rivet"
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

// A cron expression without a zone is UTC, whatever the node's own zone.
func TestCronWithoutAZoneIsUTC(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	local := time.Local
	time.Local = ny // as TZ=America/New_York would
	defer func() { time.Local = local }()
	from := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	c := pendingCall{at: from, rec: scheduleRecord{Name: "d", Cron: "0 9 * * *"}}
	if got := time.UnixMilli(c.following(from).at).UTC(); got.Hour() != 9 {
		t.Errorf("0 9 * * * next at %v, want 09:00 UTC", got)
	}
	if _, err := parseCron("CRON_TZ=Local 0 9 * * *"); err == nil {
		t.Error("the zone Local was accepted")
	}
}

// Where the zone's clocks change, a daily run at a wall-clock time the zone
// repeats runs once, and one at a time it skips runs that day, an hour
// later (Paris: 2026-10-25 03:00 CEST becomes 02:00 CET; 2026-03-29 02:00
// CET becomes 03:00 CEST).
func TestCronAcrossClockChanges(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	next := func(at time.Time) time.Time {
		c := pendingCall{at: at.UnixMilli(), rec: scheduleRecord{Name: "d", Cron: "CRON_TZ=Europe/Paris 30 2 * * *"}}
		return time.UnixMilli(c.following(at.UnixMilli() + 500).at).In(paris)
	}
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC) // 02:30 CEST
	if got, want := next(first), time.Date(2026, 10, 26, 2, 30, 0, 0, paris); !got.Equal(want) {
		t.Errorf("fall back: after %v, next at %v, want %v", first.In(paris), got, want)
	}
	before := time.Date(2026, 3, 28, 2, 30, 0, 0, paris)
	gap := next(before)
	if want := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC); !gap.Equal(want) { // 03:30 CEST
		t.Errorf("spring forward: after %v, next at %v, want %v", before, gap, want.In(paris))
	}
	if got, want := next(gap), time.Date(2026, 3, 30, 2, 30, 0, 0, paris); !got.Equal(want) {
		t.Errorf("after the shifted run %v, next at %v, want %v", gap, got, want)
	}
}

// A cron call's first run, computed when it is scheduled, follows the same
// rule where clocks change as the later ones: a daily 02:30 scheduled the
// evening before Paris skips 02:00-03:00 runs that night at 03:30.
func TestCronFirstRunAcrossASkippedHour(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[struct{ N int }]{
		Name: "cronprobe",
		Actions: rivet.Actions[struct{ N int }]{
			"tick": rivet.Action0(func(*rivet.ActionCtx[struct{ N int }]) (int, error) { return 0, nil }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := reg.Lookup("cronprobe")
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	a := &activation{h: &Host{cfg: DefaultConfig()}, spec: sp, ref: Ref{Name: "cronprobe", Key: []string{"k"}}}
	s := &turnSchedule{a: a, now: time.Date(2026, 3, 28, 23, 0, 0, 0, paris)}
	if _, err := s.Cron("daily", "CRON_TZ=Europe/Paris 30 2 * * *", "tick"); err != nil {
		t.Fatal(err)
	}
	if got, want := time.UnixMilli(a.sched[0].at), time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("first run of a daily 02:30 scheduled at %v: %v, want %v (03:30 CEST that night)", s.now, got.In(paris), want.In(paris))
	}
}

// A recurring call's last error is cut on a character, to at most
// maxLastError bytes.
func TestClipErrorKeepsCharactersWhole(t *testing.T) {
	for _, n := range []int{maxLastError - 4, maxLastError - 3, maxLastError - 2, maxLastError} {
		s := strings.Repeat("a", n) + strings.Repeat("é", 40)
		got := clipError(s)
		if len(got) > maxLastError || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
			t.Fatalf("clipError of %d bytes: %d bytes, valid %v, %q", len(s), len(got), utf8.ValidString(got), got[len(got)-8:])
		}
	}
	if s := "short"; clipError(s) != s {
		t.Fatal("a short error was changed")
	}
}

// West of UTC too, a run at a wall-clock time the zone skips runs that
// day, shifted by the gap: New York skips 02:00-03:00 on 2026-03-08, so a
// daily 02:30 runs at 03:30 EDT, not at 01:30 EST, an hour before the gap;
// Santiago skips midnight on 2026-09-06, so a daily 00:00 runs at 01:00
// that day, not at 23:00 the day before.
func TestCronAcrossASkippedHourWestOfUTC(t *testing.T) {
	for _, tc := range []struct {
		zone, expr string
		prev, want time.Time // want in UTC
	}{
		{"America/New_York", "30 2 * * *", time.Date(2026, 3, 7, 7, 30, 0, 0, time.UTC), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC)},
		{"America/Santiago", "0 0 * * *", time.Date(2026, 9, 5, 4, 0, 0, 0, time.UTC), time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC)},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		expr := "CRON_TZ=" + tc.zone + " " + tc.expr
		c := pendingCall{at: tc.prev.UnixMilli(), rec: scheduleRecord{Name: "d", Cron: expr}}
		if got := time.UnixMilli(c.following(c.at + 500).at); !got.Equal(tc.want) {
			t.Errorf("%s: after %v, next at %v, want %v", expr, tc.prev.In(loc), got.In(loc), tc.want.In(loc))
		}
		// The first run, computed when the call is scheduled, too.
		now := tc.prev.Add(time.Hour)
		sched, err := parseCron(expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := acrossClockChanges(sched.(*cron.SpecSchedule), now, now, sched.Next(now)); !got.Equal(tc.want) {
			t.Errorf("%s: first run after %v at %v, want %v", expr, now.In(loc), got.In(loc), tc.want.In(loc))
		}
	}
}

// A recurring call's runs keep to the times an id can hold (up to the
// year 2286), as At's: an interval whose first run is later is refused,
// and one whose next run would be later ends, as a cron call with no time
// left does, rather than be stored under an id that does not read back
// (readSchedules would skip it: a call no one lists, runs or cancels).
func TestEveryKeepsToTheTimesAnIDHolds(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[struct{ N int }]{
		Name: "everyprobe",
		Actions: rivet.Actions[struct{ N int }]{
			"tick": rivet.Action0(func(*rivet.ActionCtx[struct{ N int }]) (int, error) { return 0, nil }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := reg.Lookup("everyprobe")
	a := &activation{h: &Host{cfg: DefaultConfig()}, spec: sp, ref: Ref{Name: "everyprobe", Key: []string{"k"}}}
	s := &turnSchedule{a: a, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := s.Every("big", 280*365*24*time.Hour, "tick"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("Every with a first run in 2306: %v, want ErrInvalidArgument", err)
	}
	if len(a.sched) != 0 {
		t.Errorf("scheduled %+v", a.sched)
	}
	c := pendingCall{at: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), rec: scheduleRecord{Name: "d", EveryMs: (100 * 365 * 24 * time.Hour).Milliseconds(), Action: "tick"}}
	if n := c.following(c.at); n.at != 0 {
		t.Errorf("next run of an Every past the year 2286: at %d, id %q; want none", n.at, n.id)
	}
}

// A cron call's next run is after the run that came due, even where
// robfig's Next answers a time before its argument (Chatham's clocks go
// back at 03:45, to 02:45: Next of 02:45 to 03:14 that night is 02:45).
// A next run at the same time has the same id: it replaced the run that
// came due with itself, due at once: the action ran back to back.
func TestCronNextRunIsAfterTheOneThatCameDue(t *testing.T) {
	loc, err := time.LoadLocation("Pacific/Chatham")
	if err != nil {
		t.Fatal(err)
	}
	expr := "CRON_TZ=Pacific/Chatham 45 3 * * *"
	at := time.Date(2026, 4, 3, 3, 45, 0, 0, loc).UnixMilli()
	for range 5 {
		c := pendingCall{at: at, rec: scheduleRecord{Name: "d", Cron: expr}}
		c.id = everyStorageID(c.at, "d")
		n := c.following(at + 10)
		if n.at <= at || n.id == c.id {
			t.Fatalf("%s: after the run due at %v, next at %v (id %s)", expr, time.UnixMilli(at).In(loc), time.UnixMilli(n.at).In(loc), n.id)
		}
		at = n.at
	}
	// The first run, computed when the call is scheduled, is after now.
	sched, err := parseCron(expr)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 4, 5, 2, 50, 0, 0, loc)
	if got := cronNext(sched, now); !got.After(now) {
		t.Errorf("%s: first run after %v at %v", expr, now, got.In(loc))
	}
}

// Every run at a wall-clock time the zone skips runs that day, shifted by
// the gap, not only the first: with runs at 02:00 and 02:30 on New York's
// spring-forward night (02:00-03:00 skipped), 02:00 runs at 03:00 EDT and
// 02:30 at 03:30 EDT (the run that came due at 03:00 was already at the
// new offset, and the one after it went to the next day).
func TestCronRunsEveryShiftedRunOfASkippedHour(t *testing.T) {
	for _, tc := range []struct {
		zone, expr string
		prev       time.Time
		want       []time.Time // UTC
	}{
		{"America/New_York", "0,30 2 * * *", time.Date(2026, 3, 7, 7, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), time.Date(2026, 3, 9, 6, 0, 0, 0, time.UTC)}},
		{"Europe/Berlin", "0,30 2 * * *", time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC), time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC)}},
		// Hourly runs are not shifted twice: after 03:30 EDT, 04:30.
		{"America/New_York", "30 * * * *", time.Date(2026, 3, 8, 6, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), time.Date(2026, 3, 8, 8, 30, 0, 0, time.UTC)}},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		c := pendingCall{at: tc.prev.UnixMilli(), rec: scheduleRecord{Name: "d", Cron: "CRON_TZ=" + tc.zone + " " + tc.expr}}
		for i, want := range tc.want {
			c = c.following(c.at + 500)
			if got := time.UnixMilli(c.at); !got.Equal(want) {
				t.Errorf("%s %q: run %d at %v, want %v", tc.zone, tc.expr, i+1, got.In(loc), want.In(loc))
				break
			}
		}
	}
}

// Every run at a wall-clock time the zone repeats when its clocks go back
// runs once, not only a run at the time of the one that came due: with
// runs at 01:00 and 01:30 on New York's fall-back night (01:00-02:00
// repeats), each runs in EDT only, and the next run is the next day's.
func TestCronRunsEachRepeatedTimeOnce(t *testing.T) {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	c := pendingCall{at: time.Date(2026, 10, 31, 5, 30, 0, 0, time.UTC).UnixMilli(), rec: scheduleRecord{Name: "d", Cron: "CRON_TZ=America/New_York 0,30 1 * * *"}}
	for i, want := range []time.Time{
		time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC),  // 01:00 EDT
		time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
		time.Date(2026, 11, 2, 6, 0, 0, 0, time.UTC),  // 01:00 EST the next day
	} {
		c = c.following(c.at + 500)
		if got := time.UnixMilli(c.at); !got.Equal(want) {
			t.Fatalf("run %d at %v, want %v", i+1, got.In(loc), want.In(loc))
		}
	}
}
