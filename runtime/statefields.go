package runtime

import (
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"
)

// unknownFieldsEvery is how often, at most, a node warns of one actor
// type's stored states with fields the type lacks: every load of such an
// actor finds them, and a type renamed a field for all its actors at once.
const unknownFieldsEvery = time.Minute

// unknownFieldsLog rate-limits those warnings, by actor type.
type unknownFieldsLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	// quiet counts the loads not logged since the type's last warning.
	quiet map[string]int
	// loads counts every such load, by actor type, for a metric: the
	// warning is rate-limited, and a log line is easy to miss.
	loads map[string]uint64
}

// UnknownStateFieldLoads returns, by actor type, how many loads found a
// stored state with fields the type does not declare (whose values the
// actor's next change deletes).
func (h *Host) UnknownStateFieldLoads() map[string]uint64 {
	l := &h.unknownFields
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.loads)
}

// warnUnknownStateFields warns, once a minute per actor type at most,
// that a's state as stored has fields its type does not declare:
// the decode skipped their values, and the actor's next commit deletes
// them for good. A field renamed or removed in the code is the usual
// cause; the warning names the fields, so that a deploy that lost data
// says so before the data is gone from every actor (OnWake can still
// move a value from the old name: docs/architecture.md).
func (a *activation) warnUnknownStateFields(data []byte) {
	f := a.spec.UnknownStateFields
	if f == nil {
		return
	}
	unknown := f(data)
	if len(unknown) == 0 {
		return
	}
	l := &a.h.unknownFields
	l.mu.Lock()
	if l.last == nil {
		l.last, l.quiet, l.loads = map[string]time.Time{}, map[string]int{}, map[string]uint64{}
	}
	name := a.ref.Name
	l.loads[name]++
	now := time.Now()
	if last, ok := l.last[name]; ok && now.Sub(last) < unknownFieldsEvery {
		l.quiet[name]++
		l.mu.Unlock()
		return
	}
	quiet := l.quiet[name]
	l.last[name], l.quiet[name] = now, 0
	l.mu.Unlock()
	a.h.log.Warn("stored state has fields the actor's state type does not declare: their values were not loaded, and the actor's next change deletes them (a field renamed or removed in the code?)",
		actorField(a), zap.Strings("fields", unknown), zap.Int("actors_of_this_type_not_logged_since_last_warning", quiet))
}
