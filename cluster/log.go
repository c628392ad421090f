package cluster

import (
	"bytes"
	"log"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newStdLogger returns the *log.Logger memberlist writes to. Without it
// memberlist prints to stderr, bypassing the node's log configuration.
// Once shuttingDown is set, warnings and errors are logged at debug level.
func newStdLogger(z *zap.Logger, shuttingDown *atomic.Bool) *log.Logger {
	// No flags: zap adds its own timestamp, and memberlist's log.Logger
	// would otherwise prefix one that logWriter would have to strip.
	// No stack traces either: the stack of an error line is this bridge's,
	// which says nothing of memberlist's.
	return log.New(logWriter{log: z.WithOptions(zap.WithCaller(false), zap.AddStacktrace(zapcore.InvalidLevel)), shuttingDown: shuttingDown}, "", 0)
}

// logWriter turns memberlist's log lines, "[WARN] memberlist: text", into
// zap entries at the level the tag names. A *log.Logger makes one Write
// call per line, so each call is one entry.
type logWriter struct {
	log *zap.Logger
	// shuttingDown demotes warnings and errors to debug: memberlist's
	// goroutines outlive its Shutdown and report every send on the closed
	// sockets as an error ("use of closed network connection"), which would
	// alarm an operator at every clean stop.
	shuttingDown *atomic.Bool
}

func (w logWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(p)
	if level > zapcore.InfoLevel && w.shuttingDown != nil && w.shuttingDown.Load() {
		level = zapcore.DebugLevel
	}
	if ce := w.log.Check(level, ""); ce != nil {
		ce.Message = string(msg)
		ce.Write()
	}
	return len(p), nil
}

var logTags = []struct {
	tag   string
	level zapcore.Level
}{
	{"[DEBUG]", zapcore.DebugLevel},
	{"[INFO]", zapcore.InfoLevel},
	{"[WARN]", zapcore.WarnLevel},
	{"[ERR]", zapcore.ErrorLevel},
	{"[ERROR]", zapcore.ErrorLevel},
}

// peerGone reports whether a probe's error is the network's word for a
// peer that is not there (any more).
func peerGone(p []byte) bool {
	for _, s := range []string{"i/o timeout", "connection refused", "connection reset", "EOF", "no route to host"} {
		if bytes.Contains(p, []byte(s)) {
			return true
		}
	}
	return false
}

// parseLogLine returns the level of a memberlist log line and its text
// without the tag, the "memberlist: " prefix and the newline. An untagged
// line is logged at info, whole, so that nothing memberlist says is lost.
func parseLogLine(p []byte) (zapcore.Level, []byte) {
	p = bytes.TrimRight(p, "\r\n")
	level := zapcore.InfoLevel
	for _, t := range logTags {
		if rest, ok := bytes.CutPrefix(p, []byte(t.tag)); ok {
			level, p = t.level, bytes.TrimLeft(rest, " ")
			break
		}
	}
	if rest, ok := bytes.CutPrefix(p, []byte("memberlist: ")); ok {
		p = rest
	}
	if level == zapcore.ErrorLevel && bytes.HasPrefix(p, []byte("Failed fallback")) && peerGone(p) {
		// A probe of a member that does not answer: how memberlist
		// finds a dead node, which it then reports (suspect, dead) at
		// info. An ERROR at every node's death alarmed an operator for
		// nothing (a cluster trial). Other failures of the probe (a
		// stranger on the gossip port, a bad ack) stay errors.
		level = zapcore.WarnLevel
	}
	return level, p
}
