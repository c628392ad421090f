package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A member without a leader past leaderlessWarnAfter makes the node warn
// once, naming the lost quorum, and say once when a leader is back: in a
// user trial with two of three members killed the node's log named only
// what the outage cost.
func TestTheNodeSaysWhenEtcdHasNoLeader(t *testing.T) {
	defer func(d time.Duration) { leaderlessWarnAfter = d }(leaderlessWarnAfter)
	leaderlessWarnAfter = 50 * time.Millisecond
	core, logs := observer.New(zapcore.InfoLevel)
	n := &Node{log: zap.New(core)}
	var leader atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.watchQuorum(ctx, func() (bool, int) { return leader.Load(), 3 }, 5*time.Millisecond)
	}()
	count := func(msg string) int { return logs.FilterMessageSnippet(msg).Len() }
	waitLogged := func(msg string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); count(msg) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never logged %q: %v", msg, logs.All())
			}
		}
	}
	waitLogged("etcd has no leader")
	leader.Store(true)
	waitLogged("etcd has a leader again")
	cancel()
	wg.Wait()
	warn := logs.FilterMessageSnippet("etcd has no leader").All()
	if len(warn) != 1 || warn[0].Level != zapcore.WarnLevel || warn[0].ContextMap()["needed"] != int64(2) || count("etcd has a leader again") != 1 {
		t.Fatalf("logged %v: want one warning (2 of 3 members needed) and one line when the leader is back", logs.All())
	}
}
