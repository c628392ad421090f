package etcdstore

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// In a cluster of three members whose one is gone for good, the leader
// says so once per line, not every few seconds: its check of its peers'
// versions fails every 4 s ("failed to reach the peer URL", "failed to get
// version"), which a user trial saw about 30 times a minute on each
// surviving node, for ever. The test watches the leader's log for 10 s
// after the first such line: two or more checks more, none logged again
// (a slower machine checks less often, which could only hide a repeat,
// never make one).
func TestALeaderLogsADeadPeerOnceNotEveryFewSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("watches a member's log for 10 s")
	}
	before := goleak.IgnoreCurrent()
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	names := []string{"n1", "n2", "n3"}
	var peers []string
	for _, n := range names {
		peers = append(peers, fmt.Sprintf("%s=http://127.0.0.1:%d", n, port()))
	}
	type started struct {
		m    *Embedded
		logs *observer.ObservedLogs
		err  error
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan started, len(names))
	for i, n := range names {
		cfg := DefaultLocalEmbeddedConfig(t.TempDir())
		cfg.Name = n
		cfg.PeerURL = strings.TrimPrefix(peers[i], n+"=")
		cfg.InitialCluster = strings.Join(peers, ",")
		core, logs := observer.New(zapcore.InfoLevel)
		cfg.Logger = zap.New(core)
		go func() {
			m, err := StartEmbedded(ctx, cfg)
			done <- started{m, logs, err}
		}()
	}
	var members []started
	for range names {
		s := <-done
		if s.err != nil {
			t.Fatal(s.err)
		}
		members = append(members, s)
	}
	var gone *Embedded
	t.Cleanup(func() {
		for _, s := range members {
			if s.m != gone {
				s.m.Close()
			}
		}
		// A closed member's peer connections end only as their read
		// times out (etcd's peer listener sets a deadline of its own on
		// every read, which outlasts the abort of an HTTP server's
		// idle read): seconds, more than the package's leak check waits.
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if err = goleak.Find(before); err == nil {
				return
			}
		}
		t.Errorf("the members' goroutines outlived them by 20 s: %v", err)
	})

	var leader started
	for deadline := time.Now().Add(30 * time.Second); leader.m == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader within 30 s")
		}
		for _, s := range members {
			if srv := s.m.etcd.Server; srv.Leader() == srv.MemberID() {
				leader = s
			}
		}
	}
	for _, s := range members {
		if s.m != leader.m {
			gone = s.m // a follower: the leader stays
			gone.Close()
			break
		}
	}

	const unreachable = "failed to reach the peer URL"
	for deadline := time.Now().Add(30 * time.Second); leader.logs.FilterMessage(unreachable).Len() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader did not log %q within 30 s of its peer's end; it logged %v", unreachable, leader.logs.All())
		}
	}
	time.Sleep(10 * time.Second) // the window watched, not a wait for a state
	seen := map[string]int{}
	for _, l := range leader.logs.All() {
		m := l.ContextMap()
		if _, ok := m["suppressed"]; ok {
			// A minute's reminder of a line logged at the start: only
			// on a machine so slow that the members took most of a
			// minute to start and see their peer gone.
			continue
		}
		seen[fmt.Sprintf("%v %q peer %v%v%v error %v", l.Level, l.Message, m["remote-peer-id"], m["remote-member-id"], m["peer-id"], m["error"])]++
	}
	for line, n := range seen {
		if n > 1 {
			t.Errorf("logged %d times in 10 s: %s", n, line)
		}
	}
	if t.Failed() {
		t.Logf("all lines: %v", leader.logs.All())
	}
}
