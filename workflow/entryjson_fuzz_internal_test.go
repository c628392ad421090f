package workflow

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// MarshalEntry writes what encoding/json writes, byte for byte, for any
// entry: strings with any bytes (invalid UTF-8, HTML and control
// characters, quotes), raw outputs and loop states that are or are not
// JSON (spaced, escaped, non-ASCII), times in any zone and year, any
// numbers. The engine stores every entry this way and reads it back
// with encoding/json: a byte of difference is a history that reads back
// otherwise than it was recorded (a step's output, a path, a deadline).
func FuzzMarshalEntry(f *testing.F) {
	f.Add("loop/~3/charge-card", "step", "completed", "", "", "", 1, 2, []byte(`{"a":1}`), []byte(`5`), int64(1767000000), int64(123456789), 3600, []byte{1, 2}, uint8(0xff))
	f.Add("a<b>&\"\\", "sleep", "pending", "exhausted", "w", "step", -5, 1<<40, []byte(`{"a": 1}`), []byte("\"\u2028\""), int64(-62135596800), int64(0), -24*3600+1, []byte{}, uint8(0x0f))
	f.Add("\xff\x01é", "st\tep", "\u2028", "x", "\x7f", "", 0, 0, []byte(`"<x>"`), []byte(`{`), int64(253402300800), int64(1), 24*3600, []byte{255}, uint8(0xaa))
	f.Add("p", "step", "completed", "", "", "", 0, 0, []byte(`null`), []byte(` 1`), int64(0), int64(-1), 0, []byte(nil), uint8(1))
	f.Fuzz(func(t *testing.T, path, kind, status, failure, winner, removed string, seq, n int, output, state []byte, sec, nsec int64, off int, places []byte, flags uint8) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", off))
		e := Entry{
			Path: path, Seq: seq, Kind: Kind(kind), Status: Status(status),
			Attempts: n, Output: output, Failure: FailureKind(failure),
			HasRollback: flags&1 != 0, RollbackDone: flags&2 != 0, RollbackSettled: flags&4 != 0,
			RollbackAttempts: -n, Iteration: seq * 3, PrunedBefore: n / 7, State: state,
			Slots: int(flags), Winner: winner, RemovedKind: Kind(removed), Version: seq ^ n, Latest: off,
			TookMessages: n%3 == 0,
		}
		for _, p := range places {
			e.TryPlaces = append(e.TryPlaces, int(int8(p)))
		}
		if flags&8 != 0 {
			e.Time = tm
		}
		if flags&16 != 0 {
			e.LastAttemptAt = tm.Add(time.Duration(n))
		}
		if flags&32 != 0 {
			e.RollbackAttemptAt = tm.UTC()
		}
		if flags&64 != 0 {
			e.Deadline = time.Unix(sec, 0).In(time.FixedZone("d", -off))
		}
		if flags&128 != 0 {
			e.StartedAt = tm.Add(-time.Duration(n))
		}
		got, gotErr := MarshalEntry(&e)
		want, wantErr := json.Marshal(&e)
		if (gotErr != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("entry %+v:\n got %s (%v)\nwant %s (%v)", e, got, gotErr, want, wantErr)
		}
	})
}
