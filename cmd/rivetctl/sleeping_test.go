package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/workflow"
)

// actors --status sleeping lists, from every node, the actors whose
// workflow runs again at a time, the earliest first, whether in memory or
// not (a sleeper whose actor the idle timeout evicted is still listed), each
// with what its time is for; an actor in memory is as its running workflow
// says, not as its wakeup record (written when the workflow last stopped);
// ACTOR, --due-before and --limit narrow it, the limit saying how many it
// left out. --status waiting lists the workflows that wait for a message
// only. A workflow running now is in neither list.
func TestActorsSleepingOnRealNodes(t *testing.T) {
	idle := rivet.Options{IdleTimeout: 300 * time.Millisecond}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "napper", Options: idle,
		Run: func(ctx *workflow.Ctx[chargeState]) error { return ctx.Sleep("nap", time.Hour) },
	}, rivet.Actor[chargeState]{
		Name: "dozer", Options: idle,
		Run: func(ctx *workflow.Ctx[chargeState]) error { return ctx.Sleep("doze", 2*time.Hour) },
	}, rivet.Actor[chargeState]{
		// Its actor stays in memory for the whole test, however slow the
		// machine (an hour's idle timeout): its record still holds its
		// creation's time.
		Name: "timer", Options: rivet.Options{IdleTimeout: time.Hour},
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}, Timeout: 30 * time.Minute})
			return err
		},
	}, rivet.Actor[chargeState]{
		Name: "waiter", Options: idle,
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}})
			return err
		},
	}, heldWorker(entered, release))
	if err != nil {
		t.Fatal(err)
	}
	addr := startTwoNodes(t, reg, func(*node.Config) {})
	// Both nodes serve some of the partitions (8, as the ring gives them)
	// before the actors are made, so that both have some to list.
	waitForRingShares(t, addr)
	for _, a := range [][2]string{{"napper", "a"}, {"napper", "b"}, {"napper", "c"}, {"dozer", "d"}, {"timer", "x"}, {"waiter", "w"}, {"worker", "k"}} {
		if r := rivetctl(t, addr, "create", a[0], a[1]); r.code != 0 {
			t.Fatalf("create %s %s: %+v", a[0], a[1], r)
		}
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's step never started")
	}

	type wantRow struct {
		name, key, reason string
		in                time.Duration
		inMemory          bool
	}
	wantAll := []wantRow{
		{"timer", "x", client.WakeReceive, 30 * time.Minute, true},
		{"napper", "a", client.WakeSleep, time.Hour, false},
		{"napper", "b", client.WakeSleep, time.Hour, false},
		{"napper", "c", client.WakeSleep, time.Hour, false},
		{"dozer", "d", client.WakeSleep, 2 * time.Hour, false},
	}
	matches := func(rows []client.WaitingWorkflow, ws []wantRow) bool {
		if len(rows) != len(ws) {
			return false
		}
		for i, w := range ws {
			r := rows[i]
			d := time.Until(r.WakeAt)
			if r.Name != w.name || len(r.Key) != 1 || r.Key[0] != w.key || r.Reason != w.reason || r.InMemory != w.inMemory ||
				d > w.in || d < w.in-5*time.Minute || (r.Node != "n1" && r.Node != "n2") {
				return false
			}
		}
		return true
	}
	// Polled: the idle timeout evicts the sleepers a moment after they
	// block.
	var r result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "--status", "sleeping", "-o", "json")
		var rows []client.WaitingWorkflow
		if r.code == 0 && r.stderr == "" && json.Unmarshal([]byte(r.stdout), &rows) == nil && matches(rows, wantAll) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actors --status sleeping never listed %+v: exit %d, %s, %s", wantAll, r.code, r.stdout, r.stderr)
		}
	}

	// The DUE column's width varies with the durations.
	r = rivetctl(t, addr, "actors", "--status", "sleeping")
	if r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "\n") != 6 ||
		!regexp.MustCompile(`(?m)^NAME +KEY +NODE +WAKES AT +DUE +FOR\ntimer +x +n[12] +\S+Z +in (29m\d+s|30m0s) +receive timeout \(or a message in go\)$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^napper +a +n[12] +\S+Z +in (59m\d+s|1h0m0s) +sleep\nnapper +b +n[12] +\S+Z +in (59m\d+s|1h0m0s) +sleep\nnapper +c +n[12] +\S+Z +in (59m\d+s|1h0m0s) +sleep\ndozer +d +n[12] +\S+Z +in (1h59m\d+s|2h0m0s) +sleep\n$`).MatchString(r.stdout) {
		t.Errorf("actors --status sleeping: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	var rows []client.WaitingWorkflow
	jsonRows := func(args ...string) result {
		t.Helper()
		rows = nil
		r := rivetctl(t, addr, append([]string{"actors", "--status", "sleeping", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
			t.Errorf("actors %v: %v (%+v)", args, err, r)
		}
		return r
	}
	if r = jsonRows("napper"); r.code != 0 || !matches(rows, wantAll[1:4]) {
		t.Errorf("actors napper --status sleeping: %+v; want %+v", r, wantAll[1:4])
	}
	if r = jsonRows("--due-before", "45m"); r.code != 0 || !matches(rows, wantAll[:1]) {
		t.Errorf("--due-before 45m: %+v; want %+v", r, wantAll[:1])
	}
	at := time.Now().Add(90 * time.Minute).UTC().Format(time.RFC3339)
	if r = jsonRows("--due-before", at); r.code != 0 || !matches(rows, wantAll[:4]) {
		t.Errorf("--due-before %s: %+v; want %+v", at, r, wantAll[:4])
	}
	if r = jsonRows("napper", "--due-before", "30m"); r.code != 0 || r.stdout != "[]\n" {
		t.Errorf("napper --due-before 30m -o json: %+v; want []", r)
	}
	r = rivetctl(t, addr, "actors", "napper", "--status", "sleeping", "--due-before", "30m")
	if r.code != 0 || !regexp.MustCompile(`^no sleeping workflows due before \S+Z among the actors named napper\n$`).MatchString(r.stdout) {
		t.Errorf("napper --due-before 30m: %+v", r)
	}
	// The bound: the earliest two of the cluster (from either node), and a
	// note of the three left out.
	if r = jsonRows("--limit", "2"); r.code != 0 || !matches(rows, wantAll[:2]) ||
		r.stderr != `{"note":"3 more sleeping workflows left out, ones to wake after the last listed: narrow the list with ACTOR or --due-before, or raise --limit (at most 1000)"}`+"\n" {
		t.Errorf("--limit 2: %+v; want %+v and a note", r, wantAll[:2])
	}

	// Waiting: the waiter, evicted, from its record, with its queue.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "--status", "waiting", "-o", "json")
		var ws []client.WaitingWorkflow
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ws) == nil && len(ws) == 1 && ws[0].Name == "waiter" && ws[0].Key[0] == "w" &&
			!ws[0].InMemory && ws[0].WakeAt.IsZero() && len(ws[0].Queues) == 1 && ws[0].Queues[0] == "go" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actors --status waiting never listed the waiter out of memory: exit %d, %s, %s", r.code, r.stdout, r.stderr)
		}
	}
	r = rivetctl(t, addr, "actors", "--status", "waiting")
	if r.code != 0 || !regexp.MustCompile(`^NAME +KEY +NODE +WAITS FOR\nwaiter +w +n[12] +a message in go\n$`).MatchString(r.stdout) {
		t.Errorf("actors --status waiting: %+v", r)
	}
	rivetctl(t, addr, "actors", "napper", "--status", "waiting").want(t, 0, "no workflows waiting for a message only among the actors named napper\n")
	rivetctl(t, addr, "actors", "--status", "waiting", "--due-before", "1h").
		wantErr(t, 2, "rivetctl: --due-before needs --status sleeping (only a sleeping workflow has a time to wake)")
	rivetctl(t, addr, "actors", "--status", "sleeping", "--limit", "0").wantErr(t, 2, "rivetctl: --limit 0: want 1 to 1000")
	rivetctl(t, addr, "actors", "--status", "sleeping", "--due-before", "soon").
		wantErr(t, 2, `rivetctl: --due-before "soon": want a duration from now (10m, 2h, -1h) or an RFC 3339 time (2026-12-06T15:00:00Z)`)

	// A message wakes the waiter, whose workflow then ends: off the list.
	if r := rivetctl(t, addr, "send", "waiter", "w", "go", "{}"); r.code != 0 {
		t.Fatalf("send: %+v", r)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "--status", "waiting", "-o", "json")
		if r.code == 0 && r.stdout == "[]\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never left the waiting list: %+v", r)
		}
	}
}

// oldAdmin is the admin service of a node from before WaitingWorkflows,
// which lists itself as the one member.
type oldAdmin struct {
	rivetv1.UnimplementedAdminServiceServer
	addr string
}

func (o oldAdmin) Members(context.Context, *rivetv1.MembersRequest) (*rivetv1.MembersResponse, error) {
	return &rivetv1.MembersResponse{Members: []*rivetv1.Member{{NodeId: "old", GrpcAddr: o.addr, State: "alive", StartedAt: timestamppb.Now()}}}, nil
}

// serveOldAdmin serves oldAdmin, a node of a build older than the
// command under test, until the test ends, and returns its address.
func serveOldAdmin(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	rivetv1.RegisterAdminServiceServer(old, oldAdmin{addr: lis.Addr().String()})
	served := make(chan struct{})
	go func() { defer close(served); _ = old.Serve(lis) }()
	t.Cleanup(func() { old.Stop(); <-served })
	return lis.Addr().String()
}

// A node that does not list sleeping workflows (older than them) is named
// as one to upgrade, and the command fails: its empty answer would read as
// no workflow sleeping.
func TestActorsSleepingOfAnOlderNodeSaysSo(t *testing.T) {
	t.Parallel()
	addr := serveOldAdmin(t)
	r := rivetctl(t, addr, "actors", "--status", "sleeping")
	want := "rivetctl: note: node old: failed precondition: the node at " + addr + " does not list sleeping or waiting workflows (its build predates this RPC); upgrade it (FAILED_PRECONDITION node.unsupported)\n" +
		"rivetctl: no node answered (1 asked)\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1, stderr:\n%s", r.code, r.stdout, r.stderr, want)
	}
}

// A waiter that stays in memory is listed as waiting, as its blocked
// workflow says (in memory, its queue), and a step in its retry backoff
// is listed as sleeping until the retry, for a "retry".
func TestActorsWaitingInMemoryAndRetrySleeping(t *testing.T) {
	stay := rivet.Options{IdleTimeout: time.Hour}
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "listener", Options: stay,
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}})
			return err
		},
	}, rivet.Actor[chargeState]{
		Name: "retrier", Options: stay,
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "flaky", MaxRetries: 3, RetryBackoffBase: time.Hour, RetryBackoffMax: time.Hour},
				func(*workflow.StepCtx[chargeState]) error { return errors.New("busy") })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	for _, a := range [][2]string{{"listener", "l"}, {"retrier", "r"}} {
		if r := rivetctl(t, addr, "create", a[0], a[1]); r.code != 0 {
			t.Fatalf("create %s %s: %+v", a[0], a[1], r)
		}
	}
	var r result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "--status", "waiting", "-o", "json")
		var ws []client.WaitingWorkflow
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ws) == nil && len(ws) == 1 && ws[0].Name == "listener" &&
			ws[0].InMemory && ws[0].WakeAt.IsZero() && len(ws[0].Queues) == 1 && ws[0].Queues[0] == "go" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actors --status waiting never listed the listener in memory: exit %d, %s, %s", r.code, r.stdout, r.stderr)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "--status", "sleeping", "-o", "json")
		var ws []client.WaitingWorkflow
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ws) == nil && len(ws) == 1 && ws[0].Name == "retrier" &&
			ws[0].Reason == client.WakeRetry && time.Until(ws[0].WakeAt) > 10*time.Minute && time.Until(ws[0].WakeAt) < 3*time.Hour {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actors --status sleeping never listed the retrier's step retry: exit %d, %s, %s", r.code, r.stdout, r.stderr)
		}
	}
	r = rivetctl(t, addr, "actors", "--status", "sleeping")
	if r.code != 0 || !regexp.MustCompile(`(?m)^retrier +r +\S+ +\S+Z +in \S+ +step retry$`).MatchString(r.stdout) {
		t.Errorf("actors --status sleeping: %+v", r)
	}
}
