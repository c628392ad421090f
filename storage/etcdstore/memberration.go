package etcdstore

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet/internal/ration"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// memberLogPeriod is how often a member's line that repeats is logged
// again after its first: once a minute, with how many were left out.
const memberLogPeriod = time.Minute

// maxRationedLines bounds the lines a rationer remembers. etcd's
// messages are a few dozen, its peers a few, and numbers are left out of
// a line's key (keyText), so the bound is reached only by texts that
// change each time in another way, or after many peers have come and
// gone. When full, the lines not logged for a period are forgotten (what
// they would log next is logged anyway); if all are recent, a new line
// is rationed with every other new line of its level (rationKey.overflow)
// rather than grow the map or let a flood of ever-new lines through.
const maxRationedLines = 1024

// peerFields are the fields by which etcd names the peer a line is
// about: a second peer lost is another line, not a repeat of the first.
var peerFields = []string{"remote-peer-id", "remote-member-id", "peer-id"}

// rationKey is what makes two of a member's lines the same line.
type rationKey struct {
	level  zapcore.Level
	logger string
	msg    string
	peer   string // the first of peerFields it has
	err    string // its error's text: a new cause is logged at once
	// overflow: a line rationed with the others of its level, once
	// maxRationedLines are remembered.
	overflow bool
}

// rationed is a line's state: when it was last logged, and how many of it
// were left out since.
type rationed struct {
	every   ration.Every
	dropped atomic.Uint64
	logged  atomic.Int64 // unix nanoseconds of the last logged; 0: none yet
}

// rationer keeps, of each line of a member (rationKey), the first and
// then one a period, the kept one saying in "suppressed" how many it left
// out before it. A dead peer makes a member repeat a few lines for as
// long as it is dead ("prober detected unhealthy status" twice per 30 s,
// the leader's "failed to reach the peer URL" and "failed to get
// version" every 4 s, in a user trial about 30 lines a minute on each
// surviving node, for ever, under zap's sampler of 10 a minute): an
// operator expects to read of it once, then be reminded. Unlike zap's
// sampler, which counts by a hash of the message alone, it tells lines
// apart by their peer and error too, and says what it dropped.
type rationer struct {
	period time.Duration
	mu     sync.Mutex
	lines  map[rationKey]*rationed
	swept  time.Time // the last time lines were forgotten (forget)
}

func newRationer(period time.Duration) *rationer {
	return &rationer{period: period, lines: make(map[rationKey]*rationed)}
}

// keep reports whether the line e with fields is logged, and with which
// fields (a count of the lines left out before it added). An error is
// always logged: it is what an operator acts on, and etcd logs none once
// per request or raft message.
func (r *rationer) keep(e zapcore.Entry, fields []zapcore.Field) ([]zapcore.Field, bool) {
	if e.Level >= zapcore.ErrorLevel {
		return fields, true
	}
	k := rationKey{level: e.Level, logger: e.LoggerName, msg: keyText(e.Message)}
	for _, f := range fields {
		switch {
		case f.Type == zapcore.StringType && k.peer == "" && slices.Contains(peerFields, f.Key):
			k.peer = f.String
		case f.Type == zapcore.ErrorType && k.err == "":
			if err, ok := f.Interface.(error); ok && err != nil {
				k.err = keyText(err.Error())
			}
		}
	}
	r.mu.Lock()
	l := r.lines[k]
	if l == nil {
		if len(r.lines) >= maxRationedLines {
			r.forget()
		}
		if len(r.lines) >= maxRationedLines {
			k = rationKey{level: e.Level, logger: e.LoggerName, overflow: true}
			l = r.lines[k]
		}
		if l == nil {
			l = new(rationed)
			r.lines[k] = l
		}
	}
	r.mu.Unlock()
	if !l.every.Allow(r.period) {
		l.dropped.Add(1)
		return nil, false
	}
	l.logged.Store(time.Now().UnixNano())
	if n := l.dropped.Swap(0); n > 0 {
		fields = append(fields[:len(fields):len(fields)], zap.Uint64("suppressed", n))
	}
	return fields, true
}

// forget drops the lines not logged for a period, at most once a period
// (a full map of recent lines would otherwise be walked on every new
// line). Called with mu held.
func (r *rationer) forget() {
	now := time.Now()
	if now.Sub(r.swept) < r.period {
		return
	}
	r.swept = now
	for k, l := range r.lines {
		if now.UnixNano()-l.logged.Load() >= int64(r.period) {
			delete(r.lines, k)
		}
	}
}

// keyText is s as part of a line's key: cut to maxLogFieldBytes, each run
// of digits as one '#'. etcd's errors name ephemeral ports, revisions,
// durations and times ("read tcp 127.0.0.1:2380->127.0.0.1:51234: i/o
// timeout"); keyed by their digits, each would be a new line, logged at
// once, and remembered.
func keyText(s string) string {
	if len(s) > maxLogFieldBytes {
		s = s[:maxLogFieldBytes]
	}
	if strings.IndexAny(s, "0123456789") < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	digits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteByte(c)
	}
	return b.String()
}

// rationCore rations the lines of the core it wraps (rationer), in
// Write, where a line's fields are known; the wrapped core's own Check
// decides first (filtered).
type rationCore struct {
	zapcore.Core
	r *rationer
}

// rationMemberLog rations the member's lines written to c.
func rationMemberLog(c zapcore.Core, period time.Duration) zapcore.Core {
	return &rationCore{Core: c, r: newRationer(period)}
}

func (c *rationCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return filtered(c.Core, e, ce, func(fields []zapcore.Field) ([]zapcore.Field, bool) { return c.r.keep(e, fields) })
}

func (c *rationCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if fields, ok := c.r.keep(e, fields); ok {
		return c.Core.Write(e, fields)
	}
	return nil
}

// With shares the rationer: a line is the same whichever logger of the
// member logs it.
func (c *rationCore) With(fields []zapcore.Field) zapcore.Core {
	return &rationCore{Core: c.Core.With(fields), r: c.r}
}
