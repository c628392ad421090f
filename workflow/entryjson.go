package workflow

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// MarshalEntry returns e as encoding/json marshals it, byte for byte. The
// common entries (a step, a loop, a sleep: plain strings and numbers) are
// written directly; an entry with messages, branches, recorded errors, a
// string or raw value that encoding/json would escape or compact, or a
// time it would refuse, goes through encoding/json itself. A host encodes
// an entry for every step it commits: encoding/json's reflection was 8%
// of a workflow step's CPU outside etcd, and this saved 3-4% of the
// node's CPU per step (docs/benchmarks.md, session 17).
func MarshalEntry(e *Entry) ([]byte, error) {
	// Room for what an entry mostly holds (a buffer too short is copied
	// once more): its fixed fields, about 64 bytes, and each timestamp
	// with its name, up to 56.
	n := 64 + len(e.Path) + len(e.Output) + len(e.State)
	for _, t := range [...]time.Time{e.Time, e.LastAttemptAt, e.RollbackAttemptAt, e.Deadline, e.StartedAt} {
		if !t.IsZero() {
			n += 56
		}
	}
	if b, ok := appendEntry(make([]byte, 0, n), e); ok {
		return b, nil
	}
	return json.Marshal(e)
}

// appendEntry appends e's JSON to b, in Entry's field order with its
// omitempty and omitzero rules, or reports false if e needs encoding/json.
func appendEntry(b []byte, e *Entry) ([]byte, bool) {
	if e.Error != nil || e.RollbackError != nil || e.RollbackRetryError != nil || e.Messages != nil || e.Branches != nil {
		return nil, false
	}
	ok := true
	str := func(name string, v string, always bool) {
		if !ok || v == "" && !always {
			return
		}
		if !plainString(v) {
			ok = false
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':', '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	num := func(name string, v int) {
		if v == 0 {
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, int64(v), 10)
	}
	flag := func(name string, v bool) {
		if v {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, `":true`...)
		}
	}
	when := func(name string, t time.Time) {
		if !ok || t.IsZero() {
			return
		}
		if y := t.Year(); y < 0 || y > 9999 {
			ok = false // MarshalJSON refuses it; let it say so
			return
		}
		if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
			ok = false // so does it an offset of a day or more
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':', '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	raw := func(name string, v json.RawMessage) {
		if !ok || len(v) == 0 {
			return
		}
		if !plainRaw(v) {
			ok = false
			return
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	if !plainString(e.Path) {
		return nil, false
	}
	b = append(b, `{"path":"`...)
	b = append(b, e.Path...)
	b = append(b, '"')
	num("seq", e.Seq)
	if len(e.TryPlaces) > 0 {
		b = append(b, `,"try_places":[`...)
		for i, v := range e.TryPlaces {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(v), 10)
		}
		b = append(b, ']')
	}
	str("kind", string(e.Kind), true)
	str("status", string(e.Status), true)
	when("time", e.Time)
	num("attempts", e.Attempts)
	when("last_attempt_at", e.LastAttemptAt)
	raw("output", e.Output)
	str("failure", string(e.Failure), false)
	flag("has_rollback", e.HasRollback)
	flag("rollback_done", e.RollbackDone)
	flag("rollback_settled", e.RollbackSettled)
	num("rollback_attempts", e.RollbackAttempts)
	when("rollback_attempt_at", e.RollbackAttemptAt)
	when("deadline", e.Deadline)
	num("iteration", e.Iteration)
	num("pruned_before", e.PrunedBefore)
	raw("state", e.State)
	num("slots", e.Slots)
	flag("took_messages", e.TookMessages)
	str("winner", e.Winner, false)
	num("output_parts", e.OutputParts)
	str("removed_kind", string(e.RemovedKind), false)
	num("version", e.Version)
	num("latest", e.Latest)
	when("started_at", e.StartedAt)
	b = append(b, '}')
	return b, ok
}

// plainString reports whether encoding/json writes s as it is between
// quotes: printable ASCII without '"', '\\' or the characters it escapes
// for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// plainRaw reports whether encoding/json writes v as it is: valid JSON
// with nothing to compact (no whitespace) or escape (HTML characters, and
// no bytes outside ASCII, among which U+2028 and U+2029).
func plainRaw(v json.RawMessage) bool {
	for _, c := range v {
		if c <= ' ' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return json.Valid(v)
}
