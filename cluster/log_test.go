package cluster

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestMemberlistLogsGoToZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	// With stacks on errors, as a node's production logger has them.
	l := newStdLogger(zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel)), nil)
	l.Printf("[DEBUG] memberlist: Stream connection from=%s", "127.0.0.1:1")
	l.Printf("[INFO] memberlist: Marking b as failed")
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: a)")
	l.Printf("[ERR] memberlist: Failed to send ping: boom")
	l.Printf("[ERR] Failed to shutdown transport: x")
	l.Printf("[ERR] memberlist: Failed fallback TCP ping: timeout 1s: read tcp: i/o timeout")
	l.Printf("[ERR] memberlist: Failed fallback TCP ping: Unexpected msgType (7) in ping message")
	l.Printf("no tag at all")

	want := []struct {
		level zapcore.Level
		msg   string
	}{
		{zapcore.DebugLevel, "Stream connection from=127.0.0.1:1"},
		{zapcore.InfoLevel, "Marking b as failed"},
		{zapcore.WarnLevel, "Refuting a suspect message (from: a)"},
		{zapcore.ErrorLevel, "Failed to send ping: boom"},
		{zapcore.ErrorLevel, "Failed to shutdown transport: x"},
		// A dying member's probe: memberlist then reports it dead.
		{zapcore.WarnLevel, "Failed fallback TCP ping: timeout 1s: read tcp: i/o timeout"},
		// Not a dying member: a stranger on the gossip port.
		{zapcore.ErrorLevel, "Failed fallback TCP ping: Unexpected msgType (7) in ping message"},
		{zapcore.InfoLevel, "no tag at all"},
	}
	got := logs.AllUntimed()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("entry %d = %v %q, want %v %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
		if got[i].Stack != "" {
			// The bridge's own stack, which says nothing.
			t.Errorf("entry %d has a stack trace: %s", i, got[i].Stack)
		}
	}
}

func TestMemberlistDebugLogsCostNothingWhenDisabled(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w := logWriter{log: zap.New(core)}
	line := []byte("[DEBUG] memberlist: Initiating push/pull sync with: b 127.0.0.1:2\n")
	if n := testing.AllocsPerRun(100, func() { _, _ = w.Write(line) }); n != 0 {
		t.Errorf("%v allocations per disabled debug line", n)
	}
	if logs.Len() != 0 {
		t.Errorf("debug line logged at info: %v", logs.All())
	}
}

func TestMemberlistErrorsAreDebugDuringShutdown(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	var shuttingDown atomic.Bool
	l := newStdLogger(zap.New(core), &shuttingDown)
	l.Printf("[ERR] memberlist: Failed to send gossip: before")
	shuttingDown.Store(true)
	l.Printf("[ERR] memberlist: Failed to send gossip: use of closed network connection")
	l.Printf("[INFO] memberlist: still info")
	got := logs.AllUntimed()
	if len(got) != 3 || got[0].Level != zapcore.ErrorLevel || got[1].Level != zapcore.DebugLevel || got[2].Level != zapcore.InfoLevel {
		t.Errorf("entries: %v", got)
	}
}

// memberlist's lines follow the node's level as it changes while the node
// runs (rivetctl log-level says so): its debug lines show once the level
// is debug, and its warnings go once it is error.
func TestMemberlistLogsFollowALevelChangedLater(t *testing.T) {
	lvl := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	core, logs := observer.New(lvl)
	l := newStdLogger(zap.New(core), nil)
	l.Printf("[DEBUG] memberlist: at info")
	lvl.SetLevel(zapcore.DebugLevel)
	l.Printf("[DEBUG] memberlist: at debug")
	lvl.SetLevel(zapcore.ErrorLevel)
	l.Printf("[WARN] memberlist: at error")
	var got []string
	for _, e := range logs.AllUntimed() {
		got = append(got, e.Message)
	}
	if len(got) != 1 || got[0] != "at debug" {
		t.Errorf("logged %q; want only the debug line logged at debug", got)
	}
}
