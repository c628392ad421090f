package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// actors --status retrying lists, from every node, the actors in memory
// whose workflow retries a failing step, each on the node that owns it,
// with the step's attempt and last error, and says that only actors in
// memory are known; a workflow that sleeps is not listed, and one whose
// step then succeeds leaves the list.
func TestActorsRetryingOnRealNodes(t *testing.T) {
	var up atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "payer",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "charge", MaxRetries: 1000, RetryBackoffBase: 100 * time.Millisecond, RetryBackoffMax: time.Second},
				func(s *workflow.StepCtx[chargeState]) error {
					if !up.Load() {
						return rivet.UserError("card.down", "card service down", nil)
					}
					s.State.Charged++
					return nil
				})
		},
	}, rivet.Actor[chargeState]{
		Name: "sleeper",
		Run:  func(ctx *workflow.Ctx[chargeState]) error { return ctx.Sleep("nap", time.Hour) },
	}, heldWorker(entered, release))
	if err != nil {
		t.Fatal(err)
	}
	addr := startTwoNodes(t, reg, func(*node.Config) {})
	// The nodes own the partitions the ring gives each before the actors
	// are made, so that both have some of them (8 partitions, 12 keys),
	// and none moves (an actor handed off is out of memory for a moment,
	// and not listed then).
	waitForRingShares(t, addr)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("p%02d", i))
	}
	for _, k := range append(keys, "s0", "w0") {
		name := map[string]string{"s0": "sleeper", "w0": "worker"}[k]
		if name == "" {
			name = "payer"
		}
		if r := rivetctl(t, addr, "create", name, k); r.code != 0 {
			t.Fatalf("create %s %s: %+v", name, k, r)
		}
	}

	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's step never started")
	}
	var rows []client.RetryingWorkflow
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := rivetctl(t, addr, "actors", "--status", "retrying", "-o", "json")
		rows = nil
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) == len(keys) {
			if !strings.Contains(r.stderr, retryingNote) {
				t.Errorf("stderr does not say only actors in memory are known: %q", r.stderr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %d payers were never all listed retrying: exit %d, %s, %s", len(keys), r.code, r.stdout, r.stderr)
		}
	}
	var owners []client.ActorInfo
	r := rivetctl(t, addr, "actors", "payer", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &owners); err != nil {
		t.Fatalf("actors payer: %v (%+v)", err, r)
	}
	ownerOf := map[string]string{}
	onNode := map[string]int{}
	for _, o := range owners {
		ownerOf[o.Key[0]] = o.Owner
		onNode[o.Owner]++
	}
	if onNode["n1"] == 0 || onNode["n2"] == 0 {
		t.Errorf("the payers' owners: %v; want both nodes (so that both are asked)", onNode)
	}
	for i, row := range rows {
		if row.Name != "payer" || row.Key[0] != keys[i] || row.Node != ownerOf[keys[i]] || row.Node == "" || len(row.Steps) != 1 {
			t.Errorf("row %d: %+v; want payer %s on its owner %s, one step", i, row, keys[i], ownerOf[keys[i]])
			continue
		}
		if s := row.Steps[0]; s.Path != "charge" || s.Attempt < 2 || s.MaxAttempts != 1001 || !strings.Contains(s.LastError, "card service down") {
			t.Errorf("row %d's step: %+v; want charge at attempt 2 or more of 1001, with its last error", i, s)
		}
	}

	// Polled: a step between two attempts (its failed one being
	// recorded) is not in flight for that moment, and not listed.
	row := regexp.MustCompile(`(?m)^payer  p\d\d  n[12]\s+charge  attempt \d+ of 1001 .*last error: card service down$`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = rivetctl(t, addr, "actors", "payer", "--status", "retrying", "--error-contains", "card service")
		if r.code == 0 && strings.HasPrefix(r.stdout, "NAME   KEY  NODE  STEP\n") && len(row.FindAllString(r.stdout, -1)) == len(keys) &&
			r.stderr == "rivetctl: note: "+retryingNote+"\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actors payer --status retrying: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	}
	r = rivetctl(t, addr, "actors", "sleeper", "--status", "retrying")
	if r.code != 0 || r.stdout != "no workflows retrying a step among the actors named sleeper\n" {
		t.Errorf("actors sleeper --status retrying: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	r = rivetctl(t, addr, "actors", "--status", "retrying", "--error-contains", "no such text")
	if r.code != 0 || r.stdout != "no workflows retrying a step with an error containing \"no such text\"\n" {
		t.Errorf("actors --status retrying --error-contains: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	rivetctl(t, addr, "actors", "--status", "sleepy").
		wantErr(t, 2, `rivetctl: --status "sleepy": want failed, retrying, sleeping or waiting`)
	rivetctl(t, addr, "actors", "--status", "retrying", "--failed").wantErr(t, 2, "rivetctl: --failed and --status retrying go apart")
	rivetctl(t, addr, "actors", "--status", "failed").want(t, 0, "no failed workflows\n")

	up.Store(true)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := rivetctl(t, addr, "actors", "--status", "retrying", "-o", "json")
		if r.code == 0 && r.stdout == "[]\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the payers never left the list once their step could succeed: exit %d, %s, %s", r.code, r.stdout, r.stderr)
		}
	}
}

// A node that does not list retrying workflows (older than them) is named
// as one to upgrade, and the command fails: its empty answer would read as
// no workflow retrying.
func TestActorsRetryingOfAnOlderNodeSaysSo(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	r := rivetctl(t, addr, "actors", "--status", "retrying")
	want := "rivetctl: note: node node-1: failed precondition: node node-1 does not list retrying workflows (it, or the node asked through, is older than it); upgrade it (FAILED_PRECONDITION node.unsupported)\n" +
		"rivetctl: no node answered (1 asked)\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1, stderr:\n%s", r.code, r.stdout, r.stderr, want)
	}
}

// stuckStats is a node that lists a second node, n2, whose counters it
// asks for and never gets.
type stuckStats struct{ *servertest.Fake }

func (stuckStats) NodeStats(ctx context.Context, _ string, _ int, _ runtime.RetryingQuery) (runtime.Stats, error) {
	<-ctx.Done()
	return runtime.Stats{}, ctx.Err()
}

// runBounded runs the command line and waits for it for at most within:
// a command that outlives it fails the test, and is then cancelled and
// waited for.
func runBounded(t *testing.T, within time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run(ctx, args, strings.NewReader(""), &out, &errb, func(string) string { return "" })
		done <- result{code, out.String(), errb.String()}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(within):
		t.Errorf("%v: still running after %v", args, within)
		cancel()
		return <-done
	}
}

// actors --status retrying gives each call its --timeout, as the other
// listings do: the command's own context has none (actors pages for as
// long as it takes), and a node that accepts but never answers held it
// for as long as the connection lived (24.5 s with --timeout 2s).
func TestActorsRetryingKeepsToItsTimeout(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	r := runBounded(t, 15*time.Second, "--addr", silent.Addr().String(), "--timeout", "300ms", "actors", "--status", "retrying")
	if r.code != 1 || !strings.Contains(r.stderr, "deadline exceeded: no answer from "+silent.Addr().String()+" within 300ms (--timeout) (DEADLINE_EXCEEDED); for the list of nodes") {
		t.Errorf("the member list of a node that never answers: exit %d after %v, stderr %q; want exit 1 at the deadline", r.code, time.Since(start), r.stderr)
	}

	f := servertest.NewFake()
	f.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		return []runtime.Member{{NodeID: "n2", GRPCAddr: "127.0.0.1:1", State: "alive", StartedAt: time.Now()}}, nil
	}
	addr := servertest.Start(t, stuckStats{f}, servertest.Config{})
	start = time.Now()
	r = runBounded(t, 15*time.Second, "--addr", addr, "--timeout", "300ms", "actors", "--status", "retrying")
	if r.code != 1 || !strings.Contains(r.stderr, "node n2: deadline exceeded") {
		t.Errorf("a node whose counters never come: exit %d after %v, stderr %q; want exit 1 at the deadline, naming n2", r.code, time.Since(start), r.stderr)
	}
}

// cannedAdmin answers Members with one node, n1, and Stats with stats.
type cannedAdmin struct {
	rivetv1.UnimplementedAdminServiceServer
	stats *rivetv1.StatsResponse
}

func (cannedAdmin) Members(context.Context, *rivetv1.MembersRequest) (*rivetv1.MembersResponse, error) {
	return &rivetv1.MembersResponse{Members: []*rivetv1.Member{{NodeId: "n1", State: "alive", StartedAt: timestamppb.Now()}}}, nil
}

func (a cannedAdmin) Stats(context.Context, *rivetv1.StatsRequest) (*rivetv1.StatsResponse, error) {
	return a.stats, nil
}

// startCanned serves a cannedAdmin answering stats, and returns its
// address.
func startCanned(t *testing.T, stats *rivetv1.StatsResponse) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	rivetv1.RegisterAdminServiceServer(s, cannedAdmin{stats: stats})
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String()
}

// What a node leaves out of its answer is said: the actors after about
// 1 MiB of them (a note), an actor's steps after its first few (a row).
func TestActorsRetryingSaysWhatWasLeftOut(t *testing.T) {
	t.Parallel()
	step := func(path, err string) *rivetv1.PendingStep {
		return &rivetv1.PendingStep{Path: path, Attempt: 3, MaxAttempts: 5, LastError: err}
	}
	list := []*rivetv1.RetryingWorkflow{
		{Name: "invoice", Key: []string{"i1"}, Steps: []*rivetv1.PendingStep{step("send", "connection refused")}},
		{Name: "payment", Key: []string{"p1"}, Steps: []*rivetv1.PendingStep{step("charge", "card declined"), step("notify", "connection refused")}, StepsOmitted: 3},
		{Name: "payment", Key: []string{"p2"}, Steps: []*rivetv1.PendingStep{step("charge", "card declined")}},
	}
	filtered := startCanned(t, &rivetv1.StatsResponse{NodeId: "n1", RetryingCounted: true, RetryingWorkflows: list, RetryingOmitted: 7})
	r := rivetctl(t, filtered, "actors", "--status", "retrying")
	if r.code != 0 || !strings.Contains(r.stderr, "node n1 left out 7 more retrying actors") ||
		!regexp.MustCompile(`(?m)^payment +p1 +n1 +\(3 more retrying steps`).MatchString(r.stdout) {
		t.Errorf("a bounded answer: exit %d, stdout:\n%s\nstderr:\n%s\nwant the 7 actors and p1's 3 steps left out said", r.code, r.stdout, r.stderr)
	}
}

// waitForRingShares waits until the two nodes of startTwoNodes (n1, n2)
// own the partitions the ring gives each of the 8, so that both have some
// before the actors are made, and none moves after.
func waitForRingShares(t *testing.T, addr string) {
	t.Helper()
	want := map[string]uint32{}
	for _, owner := range placement.Table(8, []string{"n1", "n2"}) {
		want[owner]++
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ms []client.Member
		r := rivetctl(t, addr, "members", "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ms) == nil && len(ms) == 2 &&
			ms[0].PartitionsOwned == want[ms[0].NodeID] && ms[1].PartitionsOwned == want[ms[1].NodeID] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two nodes never owned their shares %v: %s %s", want, r.stdout, r.stderr)
		}
	}
}

// heldWorker is an actor whose workflow's step "work" says it entered
// (on entered, if no one waits yet) and runs until release closes or its
// context ends: its first attempt in flight, not retrying.
func heldWorker(entered chan<- struct{}, release <-chan struct{}) rivet.Actor[chargeState] {
	return rivet.Actor[chargeState]{
		Name: "worker",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			return ctx.Step("work", func(s *workflow.StepCtx[chargeState]) error {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-s.Context().Done():
				}
				return nil
			})
		},
	}
}
