package etcdstore

import (
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
// messages are a few dozen, its peers a few, so the bound is reached only
// by errors whose text changes each time; the rationer then starts
// afresh (their next lines are logged as firsts) rather than grow.
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
}

// rationed is a line's state: when it was last logged, and how many of it
// were left out since.
type rationed struct {
	every   ration.Every
	dropped atomic.Uint64
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
}

func newRationer(period time.Duration) *rationer {
	return &rationer{period: period, lines: make(map[rationKey]*rationed)}
}

// keep reports whether the line e with fields is logged, and with which
// fields (a count of the lines left out before it added).
func (r *rationer) keep(e zapcore.Entry, fields []zapcore.Field) ([]zapcore.Field, bool) {
	k := rationKey{level: e.Level, logger: e.LoggerName, msg: e.Message}
	for _, f := range fields {
		switch {
		case f.Type == zapcore.StringType && k.peer == "" && isPeerField(f.Key):
			k.peer = f.String
		case f.Type == zapcore.ErrorType && k.err == "":
			if err, ok := f.Interface.(error); ok && err != nil {
				k.err = err.Error()
				if len(k.err) > maxLogFieldBytes {
					k.err = k.err[:maxLogFieldBytes]
				}
			}
		}
	}
	r.mu.Lock()
	l := r.lines[k]
	if l == nil {
		if len(r.lines) >= maxRationedLines {
			clear(r.lines)
		}
		l = new(rationed)
		r.lines[k] = l
	}
	r.mu.Unlock()
	if !l.every.Allow(r.period) {
		l.dropped.Add(1)
		return nil, false
	}
	if n := l.dropped.Swap(0); n > 0 {
		fields = append(fields[:len(fields):len(fields)], zap.Uint64("suppressed", n))
	}
	return fields, true
}

func isPeerField(key string) bool {
	for _, p := range peerFields {
		if key == p {
			return true
		}
	}
	return false
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
