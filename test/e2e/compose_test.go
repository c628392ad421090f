package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/internal/metricstest"
)

// composeCmd returns the compose command of this machine.
func composeCmd() ([]string, error) {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, nil
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}, nil
	}
	return nil, fmt.Errorf("neither docker compose nor docker-compose is installed")
}

// composeEnv is a docker-compose.yml project run by a test.
type composeEnv struct {
	t       *testing.T
	root    string
	base    []string // compose command with -p and --profile
	env     []string
	project string
	ports   []string // localhost gRPC address of node1..node4
	https   []string // localhost HTTP (metrics) address of node1..node4
	clients []*client.Client
}

// command is args run in the repository with the project's environment.
func (e *composeEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = e.root, append(os.Environ(), e.env...)
	return cmd
}

func (e *composeEnv) run(args ...string) string {
	e.t.Helper()
	out, err := e.command(args...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *composeEnv) compose(args ...string) string {
	e.t.Helper()
	return e.run(e.composeArgs(args...)...)
}

// composeArgs is the compose command line for the project's args.
func (e *composeEnv) composeArgs(args ...string) []string {
	return append(slices.Clone(e.base), args...)
}

func (e *composeEnv) container(svc string) string {
	e.t.Helper()
	return strings.TrimSpace(e.compose("ps", "-q", svc))
}

func (e *composeEnv) logs() string {
	out, _ := e.command(e.composeArgs("logs", "--no-color", "--tail", "40")...).CombinedOutput()
	return string(out)
}

// logsSince returns the services' log lines from since on (the nodes log
// JSON with a unix "ts"), for a failure's message.
func (e *composeEnv) logsSince(since time.Time, svcs ...string) string {
	var b strings.Builder
	for _, svc := range svcs {
		out, _ := exec.Command("docker", "logs", e.container(svc)).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			var rec struct {
				TS logTS `json:"ts"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && float64(rec.TS) >= float64(since.UnixNano())/1e9 {
				fmt.Fprintf(&b, "%s +%.3fs %s\n", svc, float64(rec.TS)-float64(since.UnixNano())/1e9, line)
			}
		}
	}
	return b.String()
}

// waitHealthy waits until the services' containers report healthy.
func (e *composeEnv) waitHealthy(within time.Duration, svcs ...string) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	var ctrs []string // named once: each docker-compose call takes a second or so
	for _, svc := range svcs {
		ctrs = append(ctrs, e.container(svc))
	}
	for {
		healthy := 0
		for _, ctr := range ctrs {
			out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Health.Status}}", ctr).Output()
			if strings.TrimSpace(string(out)) == "healthy" {
				healthy++
			}
		}
		if healthy == len(svcs) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%v not healthy within %v:\n%s", svcs, within, e.logs())
		}
		time.Sleep(time.Second)
	}
}

// waitMembers waits until node1 lists exactly the nodes want as alive,
// each owning partitions, and returns how long that took.
func (e *composeEnv) waitMembers(within time.Duration, want ...string) time.Duration {
	e.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ms, err := e.clients[0].Members(cctx)
		cancel()
		var got []string
		for _, m := range ms {
			if m.State == "alive" && m.PartitionsOwned > 0 {
				got = append(got, m.NodeID)
			}
		}
		if err == nil && strings.Join(got, ",") == strings.Join(want, ",") {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("members through %s: %+v, %v; want %v alive with partitions\n%s", e.ports[0], ms, err, want, e.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probeKey returns a counter key whose partition node owns now.
func (e *composeEnv) probeKey(node string) string {
	e.t.Helper()
	tab, err := e.clients[0].Partitions(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ownersOf(tab).key(e.t, "counter", "probe", func(o string) bool { return o == node })
}

// untilServed calls getCount on a counter through node1 until it
// succeeds and returns the time since from.
func (e *composeEnv) untilServed(key string, from time.Time, within time.Duration) time.Duration {
	e.t.Helper()
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := e.clients[0].GetOrCreate("counter", key).Call(cctx, "getCount")
		cancel()
		if err == nil {
			return time.Since(from)
		}
		if time.Since(from) > within {
			e.t.Fatalf("counter %s not served through node1 within %v: %v\n%s", key, within, err, e.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The repository's docker-compose.yml, built and run as `make up` does,
// then operated as a user would: every seed scenario with rivetctl against
// the published ports, a 4th node from the "scale" profile, and three
// faults under a load whose lost and duplicated operations are counted
// (both must be zero): `docker kill` of a node, `docker network
// disconnect` of a node (it must stop serving within its lease while the
// others go on, and heal on reconnect), and `docker compose restart` of
// every node (every actor's state and a sleeping workflow survive). Run by
// `make e2e` (RIVET_COMPOSE_E2E=1) and by CI when a Docker engine answers.
func TestComposeCluster(t *testing.T) {
	if os.Getenv("RIVET_COMPOSE_E2E") == "" {
		t.Skip("set RIVET_COMPOSE_E2E=1 (make e2e does) to build the image and run docker-compose.yml")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no Docker engine here: %v", err)
	}
	compose, err := composeCmd()
	if err != nil {
		t.Skip(err.Error())
	}
	root, _ := filepath.Abs("../..")
	e := &composeEnv{t: t, root: root, project: fmt.Sprintf("rivete2e%d", os.Getpid())}
	e.base = append(append([]string{}, compose...), "-p", e.project, "--profile", "scale")

	// The examples' HTTP API, served on the host for the containers.
	api, err := exampleapi.NewTestServerOn("0.0.0.0:0", map[string]int{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	apiPort := api.Listener.Addr().(*net.TCPAddr).Port

	e.run("env", "CGO_ENABLED=0", "go", "build", "-trimpath", "-o", "bin/rivet-node", "./cmd/node")
	e.run("env", "CGO_ENABLED=0", "go", "build", "-trimpath", "-o", "bin/rivetctl", "./cmd/rivetctl")
	image := "rivet-go:e2e"
	e.run("docker", "build", "-q", "-t", image, ".")

	e.env = []string{"RIVET_IMAGE=" + image, fmt.Sprintf("EXAMPLES_API_URL=http://host.docker.internal:%d", apiPort), fmt.Sprintf("RIVET_MEM_LIMIT=%d", composeMemLimit)}
	for i := 1; i <= 4; i++ {
		p, h := freePort(t), freePort(t)
		e.ports, e.https = append(e.ports, p), append(e.https, h)
		e.env = append(e.env, fmt.Sprintf("RIVET_PORT%d=%s", i, p[strings.LastIndex(p, ":")+1:]), fmt.Sprintf("RIVET_HTTP%d=%s", i, h[strings.LastIndex(h, ":")+1:]))
	}
	t.Cleanup(func() { _ = e.command(e.composeArgs("down", "-v", "-t", "5")...).Run() })
	e.compose("up", "-d", "node1", "node2", "node3")
	e.waitHealthy(3*time.Minute, "node1", "node2", "node3")
	for _, p := range e.ports {
		c, err := client.New(p)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		e.clients = append(e.clients, c)
	}
	e.waitMembers(60*time.Second, "node1", "node2", "node3")

	ok := t.Run("seed scenarios", func(t *testing.T) {
		// rivetctl against each published port in turn: most commands
		// are forwarded, and the scatter and coordinator calls cross
		// nodes.
		var nodes []*nodeProc
		for _, p := range e.ports[:3] {
			nodes = append(nodes, &nodeProc{t: t, grpcAddr: p})
		}
		i := 0
		seedScenarios(t, func() *nodeProc { i++; return nodes[i%3] })
	})
	ok = ok && t.Run("scale out", func(t *testing.T) { e.t = t; composeScaleOut(e) })
	ok = ok && t.Run("docker kill", func(t *testing.T) { e.t = t; composeKill(e) })
	ok = ok && t.Run("network disconnect", func(t *testing.T) { e.t = t; composeDisconnect(e) })
	ok = ok && t.Run("metrics", func(t *testing.T) { e.t = t; composeMetrics(e) })
	_ = ok && t.Run("restart all", func(t *testing.T) { e.t = t; composeRestart(e) })
}

// composeScaleOut adds node4, a node with no etcd member, which takes a
// share of the partitions; stopped with SIGTERM, it hands them back.
func composeScaleOut(e *composeEnv) {
	e.compose("up", "-d", "node4")
	e.waitHealthy(2*time.Minute, "node4")
	took := e.waitMembers(60*time.Second, "node1", "node2", "node3", "node4")
	ctx := context.Background()
	for k := range 10 {
		if _, err := rivet.Call[int](ctx, e.clients[3].GetOrCreate("counter", fmt.Sprintf("s%d", k)), "increment", 1); err != nil {
			e.t.Fatalf("increment through node4: %v", err)
		}
	}
	e.t.Logf("FIGURE compose: node4 (etcd client only) owns partitions %v after healthy", took.Round(time.Millisecond))
	e.compose("stop", "-t", "20", "node4")
	e.waitMembers(60*time.Second, "node1", "node2", "node3")
	for k := range 10 {
		n, err := rivet.Call[int](ctx, e.clients[0].Get("counter", fmt.Sprintf("s%d", k)), "getCount")
		if err != nil || n != 1 {
			e.t.Fatalf("counter s%d after node4 left = %d, %v; want 1", k, n, err)
		}
	}
}

// composeKill kills node3's container under load, with reminders
// sleeping until just after the kill: the failover of the cluster issue,
// in containers.
func composeKill(e *composeEnv) {
	load := startLoad(e.clients[:2], 4, 12, "k")
	defer load.stop()
	ctx := context.Background()
	tab, err := e.clients[0].Partitions(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	owner := ownersOf(tab).of
	// The victim is named first (docker-compose takes a second or two) and
	// the reminders are sent at once (one after another they took seconds
	// under the load, and came due before the kill they were meant to
	// outlive); the kill comes 2 s before the first is due (docker kill
	// itself took 2 s on a loaded machine).
	victim := e.container("node3")
	probe := e.probeKey("node3")
	const reminders = 30
	dueFrom := time.Now().Add(5 * time.Second)
	onVictim := 0
	sent := make(chan error, reminders)
	for i := range reminders {
		key := fmt.Sprintf("kr%d", i)
		if owner("reminderActor", key) == "node3" {
			onVictim++
		}
		at := dueFrom.Add(time.Duration(i) * 20 * time.Millisecond)
		go func() {
			sent <- e.clients[0].GetOrCreate("reminderActor", key).Send(ctx, "reminders", map[string]any{"text": key, "at": at.UnixMilli()})
		}()
	}
	for range reminders {
		if err := <-sent; err != nil {
			e.t.Fatal(err)
		}
	}
	if onVictim == 0 {
		e.t.Fatalf("no reminder sleeps on node3; the test proves nothing")
	}
	if time.Until(dueFrom) < 2500*time.Millisecond {
		e.t.Fatalf("sending the reminders took until %v before they are due; the kill must come before", time.Until(dueFrom))
	}
	time.Sleep(time.Until(dueFrom.Add(-2 * time.Second)))
	e.run("docker", "kill", victim)
	killed := time.Now()
	if killed.After(dueFrom) {
		e.t.Fatalf("the kill came %v after the first reminder was due", killed.Sub(dueFrom))
	}
	// Every reminder fires exactly once; the latest is reported, and
	// bounded by the lease TTL plus 2 s, plus 2 s more: an etcd election
	// (if node3's member led) and the observation's own delay. Each
	// reminder is watched from the kill on by its own poller, so that a
	// read held up by the dead node does not delay the observation of the
	// others. (Watching only once the failover was measured made every
	// reminder look as late as the failover.)
	var (
		mu    sync.Mutex
		worst time.Duration
		lates []string
		wg    sync.WaitGroup
		fails = make(chan string, reminders)
	)
	for i := range reminders {
		key := fmt.Sprintf("kr%d", i)
		due := dueFrom.Add(time.Duration(i) * 20 * time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				raw, err := e.clients[0].Get("reminderActor", key).Call(cctx, "getState")
				cancel()
				var st struct{ Fired []string }
				if err == nil && json.Unmarshal(raw, &st) == nil && len(st.Fired) > 0 {
					if len(st.Fired) != 1 || st.Fired[0] != key {
						fails <- fmt.Sprintf("reminder %s fired %v, want exactly [%s]", key, st.Fired, key)
						return
					}
					late := time.Since(due)
					if late < -100*time.Millisecond { // poll period slack
						fails <- fmt.Sprintf("reminder %s fired %v before its time", key, -late)
						return
					}
					mu.Lock()
					worst = max(worst, late)
					lates = append(lates, fmt.Sprintf("%s@%s:%v", key, owner("reminderActor", key), late.Round(10*time.Millisecond)))
					mu.Unlock()
					return
				}
				if time.Since(killed) > time.Minute {
					fails <- fmt.Sprintf("reminder %s did not fire within a minute of the kill: %s, %v", key, raw, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	failover := e.untilServed(probe, killed, time.Minute)
	wg.Wait()
	close(fails)
	for f := range fails {
		e.t.Error(f)
	}
	if e.t.Failed() {
		e.t.FailNow()
	}
	load.stop()
	r := load.verify(e.t, e.clients[0], time.Minute)
	e.t.Logf("FIGURE compose docker kill: kill -> moved actor serving %v; %d reminders fired once each (%d on node3), the latest %v after its time; load: %v",
		failover.Round(time.Millisecond), reminders, onVictim, worst.Round(time.Millisecond), r)
	if r.lost != 0 || r.duplicated != 0 || r.ops == 0 {
		e.t.Fatalf("docker kill: %v", r)
	}
	sort.Strings(lates)
	e.t.Logf("reminders (key@owner before the kill:late): %v", lates)
	if limit := leaseTTL + 4*time.Second; worst > limit {
		e.t.Errorf("a reminder fired %v after its time, over %v: %v\n%s", worst, limit, lates, e.logsSince(killed.Add(-time.Second), "node1", "node2"))
	}
	e.compose("up", "-d", "node3")
	e.waitHealthy(2*time.Minute, "node3")
	back := e.waitMembers(60*time.Second, "node1", "node2", "node3")
	e.t.Logf("FIGURE compose: node3 restarted owns partitions again %v after healthy", back.Round(time.Millisecond))
}

// composeDisconnect takes node3 off the network under load: it stops
// serving within its lease, the others serve its actors, and it heals when
// connected again.
func composeDisconnect(e *composeEnv) {
	load := startLoad(e.clients[:2], 4, 12, "n")
	defer load.stop()
	time.Sleep(time.Second)
	probe := e.probeKey("node3")
	ctr, network := e.container("node3"), e.project+"_default"
	healthy := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, "docker", "exec", ctr, "/rivetctl", "--addr", "127.0.0.1:6420", "--timeout", "1s", "health").Run() == nil
	}
	if !healthy() {
		e.t.Fatalf("node3 not serving before the disconnect\n%s", e.logs())
	}
	e.run("docker", "network", "disconnect", network, ctr)
	cut := time.Now()
	reconnected := false
	defer func() {
		if !reconnected {
			_ = exec.Command("docker", "network", "connect", "--alias", "node3", network, ctr).Run()
		}
	}()
	var stopped time.Duration
	for healthy() {
		if time.Since(cut) > time.Minute {
			e.t.Fatalf("node3 still serving a minute after losing the network")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped = time.Since(cut)
	failover := e.untilServed(probe, cut, time.Minute)
	// Cut off, node3 serves nothing, not even an actor it used to own.
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	out, err := exec.CommandContext(cctx, "docker", "exec", ctr, "/rivetctl", "--addr", "127.0.0.1:6420", "--timeout", "2s", "call", "counter", probe, "getCount").CombinedOutput()
	cancel()
	if err == nil {
		e.t.Fatalf("node3, cut off, answered a call on %s: %s", probe, out)
	}
	time.Sleep(time.Second)
	e.run("docker", "network", "connect", "--alias", "node3", network, ctr)
	reconnected = true
	healed := e.waitMembers(2*time.Minute, "node1", "node2", "node3")
	time.Sleep(time.Second) // the load goes on across the heal
	load.stop()
	r := load.verify(e.t, e.clients[0], time.Minute)
	e.t.Logf("FIGURE compose network disconnect: node3 stopped serving %v after the cut, its actors served elsewhere %v after; it owned partitions again %v after reconnecting; load: %v",
		stopped.Round(time.Millisecond), failover.Round(time.Millisecond), healed.Round(time.Millisecond), r)
	if limit := leaseTTL + 2*time.Second; stopped > limit {
		e.t.Errorf("node3 stopped serving %v after the cut, over %v", stopped, limit)
	}
	if r.lost != 0 || r.duplicated != 0 || r.ops == 0 {
		e.t.Fatalf("network disconnect: %v", r)
	}
}

// composeRestart restarts every node: every actor's state and a workflow
// sleeping across the restart survive.
func composeRestart(e *composeEnv) {
	ctx := context.Background()
	cl := e.clients[0]
	counts := map[string]int{}
	for k := range 12 {
		key := fmt.Sprintf("n%d", k)
		n, err := rivet.Call[int](ctx, cl.Get("counter", key), "getCount")
		if err != nil {
			e.t.Fatal(err)
		}
		counts[key] = n
	}
	// The seed scenarios' actors and the reminders of the kill.
	type ref struct{ actor, key string }
	refs := []ref{{"reminderActor", "main"}, {"scatterGatherActor", "main"}, {"coordinatorActor", "main"},
		{"dashboardActor", "main"}, {"timeoutActor", "main"}, {"auctionActor", "item-123"}, {"fanInOutActor", "main"},
		{"orchestratorActor", "main"}, {"timeoutFallbackActor", "main"}, {"pollBackoffActor", "main"}}
	for i := range 30 {
		refs = append(refs, ref{"reminderActor", fmt.Sprintf("kr%d", i)})
	}
	states := map[ref]string{}
	for _, r := range refs {
		raw, err := cl.Get(r.actor, r.key).Call(ctx, "getState")
		if err != nil {
			e.t.Fatalf("%s %s getState: %v", r.actor, r.key, err)
		}
		states[r] = string(raw)
	}
	// Sleeping workflows spread over the nodes, due after the restart.
	due := time.Now().Add(20 * time.Second)
	const sleepers = 6
	for i := range sleepers {
		if err := cl.GetOrCreate("reminderActor", fmt.Sprintf("compose%d", i)).Send(ctx, "reminders", map[string]any{"text": "after restart", "at": due.UnixMilli()}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.compose("restart", "-t", "10", "node1", "node2", "node3")
	restarted := time.Now()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ok := 0
		for key, want := range counts {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			n, err := rivet.Call[int](cctx, cl.Get("counter", key), "getCount")
			cancel()
			if err == nil {
				if n != want {
					e.t.Fatalf("counter %s = %d after the restart, was %d", key, n, want)
				}
				ok++
			}
		}
		if ok == len(counts) {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("actors not served within 3 min of restarting every node\n%s", e.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.t.Logf("FIGURE compose: every counter served with its state %v after restarting all nodes", time.Since(restarted).Round(time.Millisecond))
	for _, r := range refs {
		// UNAVAILABLE is the cluster saying "retry" (a write of the actor
		// was cut short by the restart's etcd leader change): retry it,
		// within a deadline, as a client would.
		var (
			raw json.RawMessage
			err error
		)
		for stateDeadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			raw, err = cl.Get(r.actor, r.key).Call(cctx, "getState")
			cancel()
			if !errors.Is(err, rivet.ErrUnavailable) || time.Now().After(stateDeadline) {
				break
			}
		}
		if err != nil || string(raw) != states[r] {
			// pollBackoffActor too: the seed scenarios cancelled its
			// workflow, and no node runs it again after the restart.
			e.t.Fatalf("%s %s after the restart: %s, %v; was %s", r.actor, r.key, raw, err, states[r])
		}
	}
	deadline = time.Now().Add(2 * time.Minute)
	for i := range sleepers {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			raw, err := cl.Get("reminderActor", fmt.Sprintf("compose%d", i)).Call(cctx, "getState")
			cancel()
			if err == nil && string(raw) == `{"fired":["after restart"]}` {
				if time.Now().Before(due) {
					e.t.Fatalf("reminder compose%d fired before its time", i)
				}
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("reminder compose%d, sleeping across the restart, did not fire: %s, %v", i, raw, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// composeMemLimit is each node container's memory limit in the test: room
// for its tests' loads many times over (a node's heap stays under 100 MB
// in them).
const composeMemLimit = 1 << 30

// composeMetrics reads node1's /metrics through its published HTTP port,
// after the loads above: what an operator scrapes is there and counts,
// its etcd member's series too.
func composeMetrics(e *composeEnv) {
	_, sums, err := metricstest.Scrape("http://" + e.https[0] + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	var got []string
	for _, m := range []string{
		"rivet_calls_total", "rivet_call_duration_seconds_count", "rivet_turn_duration_seconds_count",
		"rivet_workflow_steps_total", "rivet_queue_messages_sent_total", "rivet_queue_messages_received_total",
		"rivet_commit_batch_size_count", "rivet_commit_duration_seconds_count", "rivet_partitions_owned",
		"rivet_forwards_total", "rivet_lease_renewals_total", "rivet_cluster_members_alive",
		// node1's embedded etcd member's, which compose publishes no port of
		"etcd_server_has_leader", "etcd_mvcc_db_total_size_in_bytes",
	} {
		if sums[m] <= 0 {
			e.t.Errorf("node1 /metrics: %s = %v, want > 0", m, sums[m])
		}
		got = append(got, fmt.Sprintf("%s=%v", m, sums[m]))
	}
	if _, ok := sums["rivet_queue_messages"]; !ok {
		e.t.Errorf("node1 /metrics has no rivet_queue_messages")
	}
	// RIVET_MEM_LIMIT is each node's container limit, and the node keeps
	// its Go heap's soft limit at 80% of it (node.SetMemoryLimit).
	limit := float64(composeMemLimit)
	if got, want := sums["go_gc_gomemlimit_bytes"], math.Trunc(limit*0.8); got != want {
		e.t.Errorf("node1 /metrics: go_gc_gomemlimit_bytes = %v, want %v (80%% of the container's %d bytes)", got, want, composeMemLimit)
	}
	e.t.Logf("node1 /metrics: %s", strings.Join(got, " "))
}

// The compose files pass RIVET_GOSSIP_KEY from the shell to every node, as
// deploy.md's Security says to set it: exported, it reaches them (gossip
// otherwise runs unencrypted without a word), and unset it stays unset (a
// node refuses an empty key, so passing "" would stop the default
// cluster). Only compose's reading of the files: no engine, no image, no
// container.
func TestComposePassesTheGossipKey(t *testing.T) {
	compose, err := composeCmd()
	if err != nil {
		t.Skip(err.Error())
	}
	root, _ := filepath.Abs("../..")
	config := func(files string, env ...string) string {
		t.Helper()
		cmd := exec.Command(compose[0], append(compose[1:], "--profile", "scale", "config")...)
		cmd.Dir = root
		var base []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "RIVET_GOSSIP_KEY=") && !strings.HasPrefix(kv, "COMPOSE_FILE=") {
				base = append(base, kv)
			}
		}
		cmd.Env = append(base, append([]string{"COMPOSE_FILE=" + files, "RIVET_TOKEN=t"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s config: %v\n%s", files, err, out)
		}
		return string(out)
	}
	const key = "b3BzZG9jcy10ZXN0LWtleQ==" // 16 bytes: a key a node takes
	for _, files := range []string{"docker-compose.yml", "docker-compose.yml:docker-compose.tls.yml"} {
		out := config(files, "RIVET_GOSSIP_KEY="+key)
		if n := strings.Count(out, "RIVET_GOSSIP_KEY: "+key); n != 4 {
			t.Errorf("COMPOSE_FILE=%s: RIVET_GOSSIP_KEY reaches %d of the 4 nodes\n%s", files, n, out)
		}
		// Unset, compose names it with no value (null; a later compose
		// may leave it out), never a value such as '' or "".
		out = config(files)
		for _, line := range strings.Split(out, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && name == "RIVET_GOSSIP_KEY" {
				if v = strings.TrimSpace(v); v != "" && v != "null" {
					t.Errorf("COMPOSE_FILE=%s, RIVET_GOSSIP_KEY unset: compose passes %q to a node, want no value\n%s", files, line, out)
				}
			}
		}
	}
}
