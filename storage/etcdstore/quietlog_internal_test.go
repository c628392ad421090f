package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A member started and closed with nothing wrong logs none of the
// warnings etcd gives every embedded member ("not recommended for
// production", an unsigned auth token that is never made): a user who
// runs a node sees no warning before the first call.
func TestAnEmbeddedMemberStartsWithoutItsHarmlessWarnings(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := DefaultLocalEmbeddedConfig(t.TempDir())
	cfg.Logger = zap.New(core)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli := e.Client()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	e.Close()
	for _, l := range logs.All() {
		switch l.Message {
		case msgSinglePort, msgSimpleToken, msgStorageVersion:
			t.Errorf("logged at %v: %q %v", l.Level, l.Message, l.ContextMap())
		}
	}
}

// Of "failed to update storage version" and "Failed to detect schema
// version", only the entries of a schema not yet detectable (the member's
// first apply still to come) are dropped: any other failure to record the
// storage version is logged.
func TestOnlyAnUndetectableSchemaIsDroppedFromStorageVersionErrors(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var muted atomic.Bool
	lg := zap.New(&mutableCore{Core: core, muted: &muted})
	lg.Error(msgStorageVersion, zap.String("cluster-version", "3.7.0"), zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	lg.Error(msgStorageVersion, zap.Error(errors.New("cannot detect storage schema version: missing confstate information")))
	lg.Warn(msgSchemaDetect, zap.Error(errors.New("missing term information")))
	lg.Error(msgStorageVersion, zap.Error(errors.New(`cannot create migration plan: version "3.8.0" is not supported`)))
	lg.Warn("some other warning")
	got := logs.All()
	if len(got) != 2 || got[0].Message != msgStorageVersion || got[1].Message != "some other warning" {
		t.Fatalf("logged %v, want the migration plan error and the other warning", got)
	}
	if err := got[0].ContextMap()["error"]; err != `cannot create migration plan: version "3.8.0" is not supported` {
		t.Errorf("kept error %v", err)
	}
	muted.Store(true)
	lg.Error("after close")
	if n := logs.Len(); n != 2 {
		t.Errorf("a muted core logged: %d entries", n)
	}
}

// A member's warning that etcd logs once per raft message or request, or
// every few seconds while a peer is dead, is logged once and then once a
// minute, each line counted apart: a leader whose peer restarted after a
// crash logged "dropped internal Raft message since sending buffer is
// full" some 700 times a second while the peer replayed its log. Another
// peer's line, and another level's, still pass; info does not, and the
// harmless warnings and a closing member's lines stay dropped.
func TestAMembersRepeatedWarningIsLoggedOnceAMinute(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var closing atomic.Bool
	lg := memberLogger(zap.New(core), &closing)
	const flood = "dropped internal Raft message since sending buffer is full"
	for range 500 {
		lg.Warn(flood, zap.String("message-type", "MsgHeartbeat"))
	}
	lg.Warn("lost TCP streaming connection with remote peer", zap.String("remote-peer-id", "a"))
	lg.Warn("lost TCP streaming connection with remote peer", zap.String("remote-peer-id", "b"))
	lg.Error(flood) // another level: counted apart
	lg.Info("starting a member")
	lg.Warn(msgSinglePort)
	byMsg := map[string]int{}
	for _, l := range logs.All() {
		byMsg[l.Level.String()+" "+l.Message]++
		if l.LoggerName != "etcd" {
			t.Errorf("logged by %q, want etcd", l.LoggerName)
		}
	}
	want := map[string]int{
		"warn " + flood: 1,
		"warn lost TCP streaming connection with remote peer": 2,
		"error " + flood: 1,
	}
	for k, n := range want {
		if byMsg[k] != n {
			t.Errorf("%q logged %d times, want %d", k, byMsg[k], n)
		}
	}
	if len(byMsg) != len(want) {
		t.Errorf("logged %v, want %v", byMsg, want)
	}
	closing.Store(true)
	lg.Warn("after close")
	if n := logs.FilterMessage("after close").Len(); n != 0 {
		t.Errorf("a closing member logged %d entries", n)
	}
}

// A line a dead peer makes a member repeat is logged the first time, then
// once a period while it goes on, saying how many it left out since the
// last ("suppressed"), though a field of it (the round trip time) changes
// each time. The same message about another peer, with another error, at
// another level, and another message are each logged at once.
func TestARationedLineSaysHowManyWereLeftOut(t *testing.T) {
	const period = 200 * time.Millisecond
	core, logs := observer.New(zapcore.InfoLevel)
	lg := zap.New(rationMemberLog(core, period)).Named("etcd")
	const prober = "prober detected unhealthy status"
	refused := errors.New("dial tcp 127.0.0.1:2390: connect: connection refused")
	sent := 0
	probe := func() {
		sent++
		lg.Warn(prober, zap.String("round-tripper-name", "ROUND_TRIPPER_SNAPSHOT"), zap.String("remote-peer-id", "a"),
			zap.Duration("rtt", time.Duration(sent)*time.Millisecond), zap.Error(refused))
	}
	for range 30 {
		probe()
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d of 30 repeated lines logged within the period, want 1", n)
	}
	if _, ok := logs.All()[0].ContextMap()["suppressed"]; ok {
		t.Errorf("the first line says it suppressed some: %v", logs.All()[0].ContextMap())
	}

	lg.Warn(prober, zap.String("remote-peer-id", "b"), zap.Error(refused))
	lg.Warn(prober, zap.String("remote-peer-id", "a"), zap.Error(errors.New("dial tcp 127.0.0.1:2390: i/o timeout")))
	lg.Error(prober, zap.String("remote-peer-id", "a"), zap.Error(refused))
	lg.Warn("failed to reach the peer URL", zap.String("remote-member-id", "a"), zap.Error(refused))
	if n := logs.Len(); n != 5 {
		t.Fatalf("logged %d lines, want 5: another peer, error, level and message each at once: %v", n, logs.All())
	}

	// The repeated line comes back once the period is over, with the count
	// of those left out since the first: all sent but the two logged.
	for deadline := time.Now().Add(20 * time.Second); logs.Len() == 5; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the repeated line was not logged again within 20 s (period %v)", period)
		}
		probe()
	}
	again := logs.All()[5]
	if logs.Len() != 6 || again.Message != prober || again.Level != zapcore.WarnLevel || again.ContextMap()["error"] != refused.Error() {
		t.Fatalf("last logged %v, want the repeated warning", again)
	}
	if got := again.ContextMap()["suppressed"]; got != uint64(sent-2) {
		t.Errorf("the line logged again says suppressed %v, want %d (sent %d, logged 2)", got, sent-2, sent)
	}
	if again.ContextMap()["rtt"] != time.Duration(sent)*time.Millisecond {
		t.Errorf("the line logged again has rtt %v, want the latest, %v", again.ContextMap()["rtt"], time.Duration(sent)*time.Millisecond)
	}
}

// An error is never rationed: each is logged, a repeat too.
func TestAMembersErrorsAreAllLogged(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	lg := zap.New(rationMemberLog(core, time.Hour)).Named("etcd")
	for range 5 {
		lg.Error("failed to apply request", zap.Error(errors.New("boom")))
	}
	if n := logs.Len(); n != 5 {
		t.Errorf("%d of 5 errors logged, want all", n)
	}
}

// An error whose text differs only by its numbers (an ephemeral port, a
// revision, a time) is the same line, and lines whose text changes every
// time in another way are rationed together once the rationer remembers
// maxRationedLines: neither its memory nor what it lets through grows
// with them.
func TestARationersLinesAreBoundedWhateverTheirErrors(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	c := rationMemberLog(core, time.Hour).(*rationCore)
	lg := zap.New(c).Named("etcd")
	const lost = "lost TCP streaming connection with remote peer"
	for port := range 1000 {
		lg.Warn(lost, zap.String("remote-peer-id", "a"),
			zap.Error(fmt.Errorf("read tcp 127.0.0.1:2380->127.0.0.1:%d: i/o timeout", 40000+port)))
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d of 1000 lines differing by a port logged, want 1", n)
	}
	for i := range 10 * maxRationedLines {
		lg.Warn(lost, zap.String("remote-peer-id", "a"), zap.Error(errors.New(strings.Repeat("x", i%50)+strings.Repeat("y", i/50))))
	}
	c.r.mu.Lock()
	remembered := len(c.r.lines)
	c.r.mu.Unlock()
	if remembered > maxRationedLines+1 {
		t.Errorf("the rationer remembers %d lines, want at most %d", remembered, maxRationedLines+1)
	}
	if n := logs.Len(); n > maxRationedLines+1 {
		t.Errorf("%d lines logged of %d ever-new ones, want at most %d", n, 10*maxRationedLines, maxRationedLines+1)
	}
}

type bigStringer int

func (n bigStringer) String() string { return strings.Repeat("é", int(n)) }

// etcd logs a slow request whole ("apply request took too long": a
// node's claim of 1,024 partitions made a line of 200 KB); the member's
// logger keeps the start of such a field and says how long it was.
func TestTheMembersLogCutsLongFields(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var closing atomic.Bool
	lg := memberLogger(zap.New(core), &closing).With(zap.String("context", strings.Repeat("c", 5000)))
	request := "txn:<" + strings.Repeat(`compare:<target:CREATE key:"/rivet/owners/00000"> `, 4000) + ">"
	lg.Warn("apply request took too long", zap.String("request", request), zap.Stringer("other", bigStringer(3000)), zap.String("prefix", "short"))
	got := logs.All()
	if len(got) != 1 {
		t.Fatalf("logged %d entries, want 1", len(got))
	}
	fields := got[0].ContextMap()
	for key, full := range map[string]int{"request": len(request), "other": 6000, "context": 5000} {
		s, _ := fields[key].(string)
		suffix := fmt.Sprintf("… (%d bytes in all)", full)
		if len(s) > maxLogFieldBytes+len(suffix) || !strings.HasSuffix(s, suffix) || !utf8.ValidString(s) {
			t.Errorf("%s: %d bytes ending %q, want at most %d ending %q", key, len(s), s[max(0, len(s)-40):], maxLogFieldBytes+len(suffix), suffix)
		}
	}
	if !strings.HasPrefix(fields["request"].(string), `txn:<compare:<target:CREATE key:"/rivet/owners/00000">`) {
		t.Errorf("request lost its start: %.80q", fields["request"])
	}
	if fields["prefix"] != "short" {
		t.Errorf("a short field changed: %q", fields["prefix"])
	}
}

// A restarted member's "failed to publish" while it catches up with its
// log (raft's too many requests) is dropped; any other failure to publish
// is logged.
func TestOnlyAPublishRefusedWhileApplyingIsDropped(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var muted atomic.Bool
	lg := zap.New(&mutableCore{Core: core, muted: &muted})
	lg.Warn(msgPublish, zap.String("local-member-id", "8e9e05c52164694d"), zap.Error(etcderrors.ErrTooManyRequests))
	lg.Warn(msgPublish, zap.Error(etcderrors.ErrTimeout))
	got := logs.All()
	if len(got) != 1 || got[0].ContextMap()["error"] != etcderrors.ErrTimeout.Error() {
		t.Fatalf("logged %v, want the timeout alone", got)
	}
}

// The member's logger leaves to the node's logger what it takes: its
// sampler, and a tee's levels per output (cutting long fields made every
// etcd line pass both: a review's find), and the harmless messages'
// other errors are rationed as the member's other warnings are. An entry
// with no fields is written.
func TestTheMembersLogKeepsTheNodesLoggersChoices(t *testing.T) {
	info, infoLogs := observer.New(zapcore.InfoLevel)
	errOnly, errLogs := observer.New(zapcore.ErrorLevel)
	var closing atomic.Bool
	memberLogger(zap.New(zapcore.NewTee(info, errOnly)), &closing).Warn("some etcd warning")
	if infoLogs.Len() != 1 || errLogs.Len() != 0 {
		t.Errorf("a warning reached %d info and %d error-only outputs, want 1 and 0", infoLogs.Len(), errLogs.Len())
	}
	sampledCore, sampled := observer.New(zapcore.InfoLevel)
	lg := zap.New(ShortFields(zapcore.NewSamplerWithOptions(sampledCore, time.Minute, 1, 0)))
	for range 5 {
		lg.Warn("same")
	}
	if sampled.Len() != 1 {
		t.Errorf("a sampler below let %d of 5 identical lines through, want 1", sampled.Len())
	}
	core, logs := observer.New(zapcore.InfoLevel)
	member := memberLogger(zap.New(core), &closing)
	for range 50 {
		member.Warn(msgPublish, zap.Error(etcderrors.ErrTimeout))
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d of 50 publish failures logged, want the first", n)
	}
}

// The member's logs follow the node's level upward, as it changes while
// the node runs, and never go below warnings (rivetctl log-level says
// so): at debug, etcd's info chatter stays out; at error, its warnings go.
func TestTheMemberLogsWarningsAndUpWithinALevelChangedLater(t *testing.T) {
	lvl := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, logs := observer.New(lvl)
	lg := memberLogger(zap.New(core), new(atomic.Bool))
	lvl.SetLevel(zapcore.DebugLevel)
	lg.Debug("debug at debug")
	lg.Info("info at debug")
	lg.Warn("warn at debug")
	lvl.SetLevel(zapcore.ErrorLevel)
	lg.Warn("warn at error")
	lg.Error("error at error")
	var got []string
	for _, e := range logs.AllUntimed() {
		got = append(got, e.Message)
	}
	if strings.Join(got, ", ") != "warn at debug, error at error" {
		t.Errorf("logged %q; want the warning at debug and the error at error", got)
	}
}
