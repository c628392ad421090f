package node

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/server"
)

// logLevels are the levels an operator may set: zap's others (dpanic,
// panic, fatal) would silence errors, which no on-call wants.
var logLevels = []string{"debug", "info", "warn", "error"}

// parseLogLevel returns the level of one of logLevels, in any case, or
// INVALID_ARGUMENT naming them.
func parseLogLevel(s string) (zapcore.Level, error) {
	for _, l := range logLevels {
		if strings.EqualFold(s, l) {
			var lvl zapcore.Level
			_ = lvl.Set(l)
			return lvl, nil
		}
	}
	return 0, rivet.Errorf(rivet.ErrInvalidArgument, "unknown log level %q: want one of %s", s, strings.Join(logLevels, ", "))
}

// levelControl is the node's log level as an operator changes it while
// the node runs (server.LogLeveler): the AtomicLevel of the node's logger,
// with at most one revert pending. Its revert timer is its only goroutine,
// which stop ends.
type levelControl struct {
	level zap.AtomicLevel
	log   *zap.Logger

	mu sync.Mutex // guards the fields below
	// revert is the pending revert's timer, nil if none; revertTo and
	// revertAt are its level and time, gen its number, which its func
	// checks (a timer that fired as a set replaced it finds another).
	revert   *time.Timer
	revertTo zapcore.Level
	revertAt time.Time
	gen      uint64
	stopped  bool
}

func newLevelControl(level zap.AtomicLevel, log *zap.Logger) *levelControl {
	return &levelControl{level: level, log: log}
}

// state returns the level now and the pending revert, if any.
func (c *levelControl) state() server.LogLevel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateLocked()
}

func (c *levelControl) stateLocked() server.LogLevel {
	st := server.LogLevel{Level: c.level.Level().String()}
	if c.revert != nil {
		st.RevertLevel, st.RevertAt = c.revertTo.String(), c.revertAt
	}
	return st
}

// apply sets the level to lvl and logs why at WARN, with the old and new
// levels, under whichever of the two shows a WARN: before the change to
// error (which hides it), after a change from error.
func (c *levelControl) apply(lvl zapcore.Level, why string, fields ...zap.Field) {
	old := c.level.Level()
	fields = append([]zap.Field{zap.Stringer("old", old), zap.Stringer("new", lvl)}, fields...)
	if !lvl.Enabled(zap.WarnLevel) {
		c.log.Warn(why, fields...)
		c.level.SetLevel(lvl)
		return
	}
	c.level.SetLevel(lvl)
	c.log.Warn(why, fields...)
}

// set sets the level to lvl, for d (0: until set again), and returns the
// state after it with the level before. A set for a while reverts to the
// level a pending revert would have set, if any: a second `--for` after a
// first must not make the first one's level the one that stays.
func (c *levelControl) set(lvl zapcore.Level, d time.Duration) (server.LogLevel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 && c.stopped {
		// No timer would set it back: the level would stay, in an
		// embedding program's logger too.
		return server.LogLevel{}, rivet.Errorf(rivet.ErrUnavailable, "the node is stopping: a level for a while (--for) is not set, as nothing would set it back")
	}
	old := c.level.Level()
	base := old
	if c.revert != nil {
		base = c.revertTo
		c.revert.Stop()
		c.revert = nil
	}
	var fields []zap.Field
	if d > 0 {
		c.gen++
		gen := c.gen
		c.revert, c.revertTo, c.revertAt = time.AfterFunc(d, func() { c.revertNow(gen) }), base, time.Now().Add(d)
		fields = append(fields, zap.Duration("for", d), zap.Stringer("then", base))
	}
	// At WARN, so that it shows at every level: a level changed by hand
	// explains the log's volume changing. Who asked is not known here
	// (the admin API knows no one beyond its token).
	c.apply(lvl, "log level changed by an operator (rivetctl log-level; not kept across a restart)", fields...)
	st := c.stateLocked()
	st.Previous = old.String()
	return st, nil
}

// revertNow applies the pending revert if it is still the gen'th.
func (c *levelControl) revertNow(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revert == nil || c.gen != gen {
		return // replaced or dropped by a set after the timer fired
	}
	c.revert = nil
	c.apply(c.revertTo, "log level reverted: its time ran out")
}

// stop ends the pending revert's timer, applying its level at once: a
// node that stops does not leave its logger (an embedding program's too)
// at a level meant to last a while. Later sets for a while are refused
// (UNAVAILABLE).
func (c *levelControl) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.revert != nil {
		c.revert.Stop()
		c.revert = nil
		c.apply(c.revertTo, "log level reverted: the node stops")
	}
}

// LogLevel reads or sets the log level of node: this one's, or another's
// that it asks through its AdminService. level "" reads it.
func (b backend) LogLevel(ctx context.Context, node, level string, revertAfter time.Duration) (server.LogLevel, error) {
	var lvl zapcore.Level
	if level != "" {
		var err error
		if lvl, err = parseLogLevel(level); err != nil {
			return server.LogLevel{}, err
		}
	}
	if revertAfter < 0 {
		return server.LogLevel{}, rivet.Errorf(rivet.ErrInvalidArgument, "revert_after %v is negative", revertAfter)
	}
	if revertAfter > 0 && level == "" {
		return server.LogLevel{}, rivet.Errorf(rivet.ErrInvalidArgument, "revert_after without a level: give the level to set for that long")
	}
	if node == "" || node == b.n.cfg.NodeID {
		c := b.n.levels
		if c == nil {
			return server.LogLevel{}, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's log level cannot change while it runs: it was started with a logger of its own and no LogLevel (node.Config)", b.n.cfg.NodeID)
		}
		st := c.state()
		if level != "" {
			var err error
			if st, err = c.set(lvl, revertAfter); err != nil {
				return server.LogLevel{}, err
			}
		}
		st.NodeID = b.n.cfg.NodeID
		return st, nil
	}
	peer, hctx, rec, err := b.adminPeer(ctx, node, "it runs no more")
	if err != nil {
		return server.LogLevel{}, err
	}
	req := &rivetv1.LogLevelRequest{NodeId: node, Level: level}
	if revertAfter > 0 {
		req.RevertAfter = durationpb.New(revertAfter)
	}
	// The node's own ID sent on, with the hop mark: a node that now
	// serves the address under another ID refuses instead of changing
	// its own level (Stats asks for the answering node's counters and
	// checks the ID after, which a change cannot be undone by).
	resp, err := peer.LogLevel(hctx, req)
	if status.Code(err) == codes.Unimplemented {
		build := "an older build"
		if rec.Build != "" {
			build = "it runs " + rec.Build
		}
		return server.LogLevel{}, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "node %s does not support log-level (%s); upgrade it", node, build)
	}
	if err != nil {
		return server.LogLevel{}, adminPeerError(err, "ask node %s at %s for its log level", node, rec.GRPCAddr)
	}
	st := server.LogLevel{NodeID: resp.GetNodeId(), Level: resp.GetLevel(), Previous: resp.GetPreviousLevel(), RevertLevel: resp.GetRevertLevel()}
	if resp.GetRevertAt() != nil {
		st.RevertAt = resp.GetRevertAt().AsTime()
	}
	if st.NodeID != node {
		return server.LogLevel{}, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's registered address %s answered as node %q", node, rec.GRPCAddr, st.NodeID)
	}
	return st, nil
}
