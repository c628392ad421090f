package runtime

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// A cron expression (Scheduler.Cron's, which an application may take
// from its users) is refused with an error or read, never a panic of
// the parser (which would fail the actor's turn, over and over); and
// the next run of one read is later than now, found in bounded time.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 9 * * *", "CRON_TZ=Europe/Paris 0 9 * * *", "TZ=America/New_York 30 2 * * *", "CRON_TZ=Local 0 9 * * *",
		"CRON_TZ=UTC", "TZ=", "TZ= ", "@daily", "@every 1s", "0 0 30 2 *", "*/0 * * * *", "1-0 * * * *", "CRON_TZ=../../etc/passwd 0 9 * * *",
		"CRON_TZ=Pacific/Chatham 45 3 * * *", "0-59/61 * * * *", "? ? ? ? ?", "CRON_TZ=UTC\t0 9 * * *", "TZ=UTC  ", "@yearly x"} {
		f.Add(s, int64(1767225600))
	}
	f.Fuzz(func(t *testing.T, expr string, now int64) {
		sched, err := parseCron(expr)
		if err != nil {
			return
		}
		from := time.Unix(now%(300*365*24*3600), 0).UTC()
		start := time.Now()
		next := cronNext(sched, from)
		if ss, ok := sched.(*cron.SpecSchedule); ok && !next.IsZero() {
			next = acrossClockChanges(ss, from, from, next)
		}
		if !next.IsZero() && !next.After(from) {
			t.Fatalf("%q: next run after %v at %v", expr, from, next)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%q: next run found in %v", expr, d)
		}
	})
}
