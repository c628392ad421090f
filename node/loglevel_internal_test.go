package node

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// waitUntil polls ok every 20 ms until it holds, failing the test after
// 20 s.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
	}
}

// levelChanges returns the WARN lines logs holds about the level, as
// "message old new".
func levelChanges(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.FilterMessageSnippet("log level").All() {
		if e.Level != zapcore.WarnLevel {
			out = append(out, "not at WARN: "+e.Message)
			continue
		}
		m := e.ContextMap()
		out = append(out, e.Message+" "+m["old"].(string)+" "+m["new"].(string))
	}
	return out
}

// An operator changes a node's log level while it runs, the node at the
// client's address or another through it, for a while or until changed
// again; the node logs each change at WARN, and sets the level back by
// itself when the while is over. An on-call trial had to restart a node
// to see its debug lines, and to turn them off again.
func TestTheLogLevelChangesWhileTheNodeRunsAndReverts(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	start := func(id string) (*Node, zap.AtomicLevel, *observer.ObservedLogs) {
		lvl := zap.NewAtomicLevelAt(zap.InfoLevel)
		core, logs := observer.New(lvl)
		cfg := ClusterConfigForTest(t, id, endpoints, "/loglevel/", 8, nil)
		cfg.Logger, cfg.LogLevel = zap.New(core), &lvl
		return StartForTest(t, ctx, cfg, reg), lvl, logs
	}
	a, levelA, logsA := start("a")
	_, levelB, logsB := start("b")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	if ll, err := c.LogLevel(ctx, ""); err != nil || ll != (client.LogLevel{NodeID: "a", Level: "info"}) {
		t.Fatalf("level of the node at the address: %+v, %v; want a's, info", ll, err)
	}
	waitUntil(t, "node b registered in a's view", func() bool { _, ok := a.view.record("b"); return ok })

	// For a while, on b through a: b's level alone changes. A minute, so
	// that the check sees it whatever the machine's load; the revert is
	// seen after, with a short one.
	before := time.Now()
	ll, err := c.SetLogLevel(ctx, "b", "DEBUG", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ll.NodeID != "b" || ll.Previous != "info" || ll.Level != "debug" || ll.RevertLevel != "info" ||
		ll.RevertAt.Before(before.Add(time.Minute)) || ll.RevertAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("set b to debug for 1m: %+v; want info -> debug, back to info in a minute", ll)
	}
	if levelB.Level() != zap.DebugLevel || levelA.Level() != zap.InfoLevel {
		t.Errorf("after b's set: a at %v, b at %v; want a at info, b at debug", levelA.Level(), levelB.Level())
	}
	// A short one over it goes back to the first one's level, by itself.
	if ll, err := c.SetLogLevel(ctx, "b", "debug", 50*time.Millisecond); err != nil || ll.RevertLevel != "info" {
		t.Fatalf("set b to debug for 50ms over the minute: %+v, %v; want back to info", ll, err)
	}
	waitUntil(t, "b's level back to info", func() bool { return levelB.Level() == zap.InfoLevel })
	if ll, err := c.LogLevel(ctx, "b"); err != nil || ll != (client.LogLevel{NodeID: "b", Level: "info"}) {
		t.Errorf("b after the revert: %+v, %v; want info, no revert pending", ll, err)
	}
	want := []string{
		"log level changed by an operator (rivetctl log-level; not kept across a restart) info debug",
		"log level changed by an operator (rivetctl log-level; not kept across a restart) debug debug",
		"log level reverted: its time ran out debug info",
	}
	if got := levelChanges(logsB); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("b's log of its level:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := levelChanges(logsA); len(got) != 0 {
		t.Errorf("a logged level changes of its own: %q", got)
	}

	// A level the node does not have, and a negative while, change
	// nothing, and say why.
	for _, node := range []string{"", "b"} {
		_, err := c.SetLogLevel(ctx, node, "verbose", 0)
		if !errors.Is(err, rivet.ErrInvalidArgument) || err.Error() != `unknown log level "verbose": want one of debug, info, warn, error` {
			t.Errorf("set node %q to verbose: %v; want INVALID_ARGUMENT naming the levels", node, err)
		}
	}
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, d := range []time.Duration{time.Minute, -time.Minute} {
		req := &rivetv1.LogLevelRequest{RevertAfter: durationpb.New(d)}
		if d < 0 {
			req.Level = "debug"
		}
		if _, err := rivetv1.NewAdminServiceClient(conn).LogLevel(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("revert after %v, level %q: %v; want INVALID_ARGUMENT", d, req.Level, err)
		}
	}
	if levelA.Level() != zap.InfoLevel {
		t.Errorf("refused sets changed the level to %v", levelA.Level())
	}

	// A second while keeps the first one's way back; a set for good
	// drops it.
	steps := []struct {
		level     string
		d         time.Duration
		want      string
		revertsTo string
	}{
		{"debug", time.Hour, "info -> debug", "info"},
		{"warn", time.Hour, "debug -> warn", "info"},
		{"error", 0, "warn -> error", ""},
		{"info", 0, "error -> info", ""},
		{"debug", time.Hour, "info -> debug", "info"},
	}
	for _, s := range steps {
		ll, err := c.SetLogLevel(ctx, "", s.level, s.d)
		if err != nil {
			t.Fatal(err)
		}
		if got := ll.Previous + " -> " + ll.Level; got != s.want || ll.RevertLevel != s.revertsTo || ll.RevertAt.IsZero() != (s.revertsTo == "") {
			t.Errorf("set %s for %v: %s, back to %q at %v; want %s, back to %q", s.level, s.d, got, ll.RevertLevel, ll.RevertAt, s.want, s.revertsTo)
		}
	}
	// Each change is in the log, that to error (which hides WARN) too.
	changed := "log level changed by an operator (rivetctl log-level; not kept across a restart) "
	want = []string{changed + "info debug", changed + "debug warn", changed + "warn error", changed + "error info", changed + "info debug"}
	if got := levelChanges(logsA); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("a's log of its level:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A node that stops ends its revert pending: its logger (an embedding
	// program's) is not left at a level meant for a while.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := a.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if levelA.Level() != zap.InfoLevel {
		t.Errorf("a stopped with a revert to info pending: at %v", levelA.Level())
	}
	if got := levelChanges(logsA); len(got) == 0 || got[len(got)-1] != "log level reverted: the node stops debug info" {
		t.Errorf("a's last line about its level: %q; want its revert as it stops", got)
	}
	// The revert comes first: the stop's own lines follow it, at info
	// and up (at the debug set for a while, a stop logs every actor's
	// deactivation and every peer's leave).
	all := logsA.All()
	i := slices.IndexFunc(all, func(e observer.LoggedEntry) bool { return e.Message == "log level reverted: the node stops" })
	if j := slices.IndexFunc(all, func(e observer.LoggedEntry) bool { return e.Message == "stopping" }); i < 0 || j < i {
		t.Fatalf("a's revert at line %d, its \"stopping\" at line %d: want the revert first", i, j)
	}
	for _, e := range all[i+1:] {
		if e.Level < zapcore.InfoLevel {
			t.Errorf("a's stop logged at %v after its revert to info: %s", e.Level, e.Message)
		}
	}
	// A set for a while reaching a stopped node is refused: nothing would
	// set it back. One without stays possible.
	if _, err := (backend{Host: a.host, n: a}).LogLevel(ctx, "", "debug", time.Minute); !errors.Is(err, rivet.ErrUnavailable) {
		t.Errorf("set a stopped node to debug for a minute: %v; want UNAVAILABLE", err)
	}
	if levelA.Level() != zap.InfoLevel {
		t.Errorf("a stopped node at %v after a refused set; want info", levelA.Level())
	}
}

// legacyAdmin is the admin service of a node from before LogLevel.
type legacyAdmin struct {
	rivetv1.UnimplementedAdminServiceServer
}

// A node whose level cannot change (started with a logger of its own and
// no LogLevel) says so; an older node, asked directly or through another,
// is named as one to upgrade, not answered with gRPC's "unknown method".
func TestTheLogLevelOfANodeThatCannotChangeItSaysWhy(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "fixed", etcdtest.Start(t), "/loglevel-fixed/", 8, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SetLogLevel(ctx, "", "debug", 0); !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "node fixed's log level cannot change while it runs") {
		t.Errorf("set the level of a node without LogLevel: %v; want FAILED_PRECONDITION saying so", err)
	}

	oldAddr := registerLegacyNode(t, ctx, n)
	_, err = c.SetLogLevel(ctx, "old", "debug", 0)
	var re *rivet.Error
	if !errors.As(err, &re) || re.Kind != rivet.ErrFailedPrecondition || re.Group != "node" || re.Code != "unsupported" ||
		re.Message != "node old does not support log-level (it runs rivet v0.9.0); upgrade it" {
		t.Errorf("set the level of an older node through another: %#v; want FAILED_PRECONDITION node.unsupported naming it", err)
	}

	oc, err := client.New(oldAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	_, err = oc.LogLevel(ctx, "")
	if !errors.As(err, &re) || re.Kind != rivet.ErrFailedPrecondition || re.Code != "unsupported" ||
		re.Message != "the node at "+oldAddr+" does not support log-level (it is older than it); upgrade it" {
		t.Errorf("the level of an older node asked directly: %#v; want FAILED_PRECONDITION node.unsupported naming its address", err)
	}
}

// registerLegacyNode serves, until the test ends, an admin service of a
// build before the newer admin RPCs (legacyAdmin: UNIMPLEMENTED), and
// registers it as node "old" (rivet v0.9.0) in n's view; it returns the
// service's address.
func registerLegacyNode(t *testing.T, ctx context.Context, n *Node) (addr string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	rivetv1.RegisterAdminServiceServer(old, legacyAdmin{})
	served := make(chan struct{})
	go func() { defer close(served); _ = old.Serve(lis) }()
	t.Cleanup(func() { old.Stop(); <-served })
	rec, _ := json.Marshal(runtime.NodeRecord{NodeID: "old", GRPCAddr: lis.Addr().String(), Build: "rivet v0.9.0"})
	if err := n.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("old"), rec)}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old node's record in the view", func() bool { _, ok := n.view.record("old"); return ok })
	return lis.Addr().String()
}
