package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
)

// upgradeFrom is the commit whose cmd/node the rolling upgrade test starts
// the cluster with: the release users run today (the last commit of the
// previous work session). Bump it when a release changes what nodes store
// or say to each other, so that the test upgrades from that release: a
// commit of storage format 3 (format3Release) since format 4 came, so
// that the mixed cluster holds the new nodes to format 3 until the last
// old one is gone.
const upgradeFrom = "660074362f0b7cab576f2afe1d3e146bcea1f2ab"

// buildAt builds cmd/node and cmd/rivetctl of the given commit of the
// repository these tests run in, from `git archive` of that commit, into
// the package's binary directory, and returns the binaries' paths. It shares the module
// and build caches with this checkout's build, so only the packages that
// differ compile again. Without git or the commit (a source archive, a
// shallow clone) there is nothing to upgrade from: the test fails if
// RIVET_UPGRADE_E2E=1 (CI sets it once it has the history) and is skipped,
// saying why, otherwise, so that `go test ./...` in a source archive does
// not fail for want of a history it never had.
func buildAt(t *testing.T, commit string) (node, rivetctl string) {
	t.Helper()
	noHistory := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("RIVET_UPGRADE_E2E") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (not run: set RIVET_UPGRADE_E2E=1 to make that a failure)", args...)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		noHistory("the rolling upgrade test builds the node of commit %s from this repository's history, and needs git and a clone: git rev-parse --show-toplevel: %v", commit, err)
	}
	root := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		noHistory("commit %s (upgradeFrom, the release the rolling upgrade starts from) is not in %s: %v %s; a shallow clone lacks it (git fetch --unshallow)", commit, root, err, bytes.TrimSpace(out))
	}
	// The source goes to the same directory on every run (removed after
	// it), so that go's build cache, whose keys name a package's
	// directory, has the old packages' compiles from the previous run:
	// then only the link is left to do. A lock keeps two runs of this
	// test on one machine out of each other's way (its file, empty, stays).
	src := filepath.Join(os.TempDir(), "upg-src-"+commit[:12])
	lock, err := os.OpenFile(src+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr, tarErr strings.Builder
	archive.Stderr, untar.Stderr = &archErr, &tarErr
	if err := untar.Start(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		t.Fatalf("git archive %s: %v %s", commit, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x of commit %s: %v %s", commit, err, tarErr.String())
	}
	node = filepath.Join(bins.dir, "node-"+commit[:7])
	rivetctl = filepath.Join(bins.dir, "rivetctl-"+commit[:7])
	for out, pkg := range map[string]string{node: "./cmd/node", rivetctl: "./cmd/rivetctl"} {
		build := exec.Command("go", "build", "-buildvcs=false", "-o", out, pkg)
		build.Dir = src
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s at %s: %v\n%s", pkg, commit, err, b)
		}
	}
	return node, rivetctl
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runRivetctl runs the rivetctl binary bin against addr and returns its
// stdout, stderr and exit code.
func runRivetctl(t *testing.T, bin, addr string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--addr", addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), code
}

// loadStats is a counter-increment load through the Go client.
type loadStats struct {
	mu        sync.Mutex
	acked     map[string]int // increments acknowledged, by key
	unknown   map[string]int // failed increments that may have applied
	calls     atomic.Int64
	transient atomic.Int64 // UNAVAILABLE or a timeout (the client retried first)
	permanent atomic.Int64 // any other error
	samples   []string
}

// "Upgrade one node at a time" (docs/deploy.md): a cluster of three nodes
// of the release users run (upgradeFrom) is upgraded to this checkout's
// node, one node at a time as deploy.md says (rivetctl drain, SIGTERM,
// the new binary on the same data directory and flags, wait until it
// serves and the partitions are balanced again), under a counter load
// through the Go client, with work that spans the upgrade: 20 sleeping
// reminders due across it, counters with known counts, an auction whose
// race sleeps across it and expires, and one sold by a bid sent to the
// mixed cluster, whose partitions also move from the new node back to the
// old ones.
// Every reminder fires exactly once, no acknowledged increment is lost,
// the load sees no permanent error, the auctions end with the seed's
// results (each external POST once), and rivetctl members shows the three
// nodes.
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	t0 := time.Now()
	old, oldCtl := buildAt(t, upgradeFrom)
	if a, b := fileBytes(t, old), fileBytes(t, bins.node); bytes.Equal(a, b) {
		t.Fatalf("the node built at %s is this checkout's node, byte for byte: the upgrade would test nothing", upgradeFrom)
	}
	t.Logf("FIGURE build of the node and rivetctl at %s: %v", upgradeFrom[:7], time.Since(t0).Round(time.Millisecond))

	// A token, as deploy.md's security section asks of a cluster: nodes
	// of both releases check it and send it to each other when they
	// forward. The node processes, rivetctl and the Go client all read it
	// from the environment.
	t.Setenv("RIVET_TOKEN", "upgrade-token-"+upgradeFrom[:7])

	api := exampleapi.NewTestServer(nil)
	defer api.Close()
	const auctionTimeout = 15 * time.Second
	env := []string{exampleapi.EnvVar + "=" + api.URL, seed.AuctionTimeoutEnv + "=" + auctionTimeout.String()}
	c := newClusterWith(t, 3, func(_ int, n *nodeProc) { n.env, n.bin = env, old })
	ids := []string{"node1", "node2", "node3"}
	c.waitBalanced(0, ids, 60*time.Second)
	t.Logf("FIGURE cluster of 3 nodes at %s up %v after the test began", upgradeFrom[:7], time.Since(t0).Round(time.Millisecond))

	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.grpcAddr)
	}
	cl, err := client.New(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The token is in force: a caller without it is refused.
	refused := func(when string) {
		t.Helper()
		nc, err := client.New(c.nodes[0].grpcAddr, client.WithToken(""))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := nc.Get("counter", "known0").Call(ctx, "getCount"); !errors.Is(err, rivet.ErrUnauthenticated) {
			t.Fatalf("a call without the token %s: %v, want %v", when, err, rivet.ErrUnauthenticated)
		}
	}
	refused("before the upgrade")
	call := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := fn(ctx); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, c.logs())
		}
	}

	// Counters with known counts, not touched by the load.
	known := map[string]int{}
	for i := range 4 {
		key := fmt.Sprintf("known%d", i)
		known[key] = 3 + i
		for range known[key] {
			call("increment "+key, func(ctx context.Context) error {
				_, err := cl.GetOrCreate("counter", key).Call(ctx, "increment", 1)
				return err
			})
		}
	}

	// The auctions: both wait in their race (a bid or the timeout) as the
	// upgrade begins, their timers set by the old release. One expires
	// (about 15 s on, past the upgrade's end on a quiet machine); the
	// other is sold by a bid sent once node1 runs the new release, with
	// node2 and node3 on the old one.
	auctionsAt := time.Now()
	for _, key := range []string{"expires", "sold"} {
		call("create auction "+key, func(ctx context.Context) error {
			_, err := cl.Create(ctx, "auctionActor", []string{key}, nil)
			return err
		})
	}

	// The load.
	ld := &loadStats{acked: map[string]int{}, unknown: map[string]int{}}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 1000000; i++ {
				key := fmt.Sprintf("load%d", (w*7+i)%32)
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := cl.GetOrCreate("counter", key).Call(cctx, "increment", 1)
				cancel()
				if ctx.Err() != nil {
					if err == nil {
						ld.mu.Lock()
						ld.acked[key]++
						ld.mu.Unlock()
					} else {
						// Cut short by the load's end: it may have applied.
						ld.mu.Lock()
						ld.unknown[key]++
						ld.mu.Unlock()
					}
					return
				}
				ld.calls.Add(1)
				ld.mu.Lock()
				switch {
				case err == nil:
					ld.acked[key]++
				default:
					if rivet.OutcomeUnknown(err) {
						ld.unknown[key]++
					}
					if errors.Is(err, rivet.ErrUnavailable) || errors.Is(err, rivet.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
						ld.transient.Add(1)
					} else {
						ld.permanent.Add(1)
					}
					if len(ld.samples) < 8 {
						ld.samples = append(ld.samples, err.Error())
					}
				}
				ld.mu.Unlock()
			}
		}()
	}
	waitCalls := func(n int64, what string) {
		t.Helper()
		target := ld.calls.Load() + n
		deadline := time.Now().Add(30 * time.Second)
		for ld.calls.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("the load stalled %s: %d calls\n%s", what, ld.calls.Load(), c.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCalls(100, "before the upgrade")

	// 20 reminders, due from 1.5 s to about 9 s from now, across the
	// upgrade (about 8 s on a quiet 2-core machine), each on its own
	// actor.
	sentAt := time.Now()
	due := map[string]time.Time{}
	for i := range 20 {
		key := fmt.Sprintf("r%d", i)
		due[key] = sentAt.Add(1500*time.Millisecond + time.Duration(i)*400*time.Millisecond)
		call("send reminder "+key, func(ctx context.Context) error {
			return cl.GetOrCreate("reminderActor", key).Send(ctx, "reminders", map[string]any{"text": key, "at": due[key].UnixMilli()})
		})
	}

	// bidLate says the bid went in so late (a slow machine: node1's
	// upgrade took most of the auction's timeout) that the auction may
	// have expired before it.
	var bidLate bool

	// The rolling upgrade: node1, node2, node3 in turn. node1 is drained
	// with the old release's rivetctl (an operator who has not upgraded
	// the CLI yet), node3 with this one's; node2 is stopped with SIGTERM
	// alone, which hands its partitions off as it stops (deploy.md: the
	// drain is optional, ahead of time).
	// Storage format 4 (format3Release's successor) is recorded only once
	// every node reads it: not while a node of the old release runs.
	var etcdEPs []string
	for _, n := range c.nodes {
		etcdEPs = append(etcdEPs, n.etcdC)
	}
	ecli, err := clientv3.New(clientv3.Config{Endpoints: etcdEPs, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ecli.Close()
	const format4 = "/rivet/cluster/formats/4"
	format4Recorded := func() bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := ecli.Get(ctx, format4)
		if err != nil {
			t.Fatalf("read %s: %v", format4, err)
		}
		return len(r.Kvs) == 1
	}
	if format4Recorded() {
		t.Fatalf("%s recorded by a cluster of the old release", format4)
	}
	upStart := time.Now()
	for i, n := range c.nodes {
		id := ids[i]
		other := c.nodes[(i+1)%3]
		stepAt := time.Now()
		out := "no drain: SIGTERM alone"
		if ctl := map[int]string{0: oldCtl, 2: bins.rivetctl}[i]; ctl != "" {
			var errOut string
			var code int
			out, errOut, code = runRivetctl(t, ctl, other.grpcAddr, "drain", id, "--wait", "60s")
			if code != 0 || !strings.Contains(out, "drained "+id) {
				t.Fatalf("%s drain %s: %q (stderr %q, exit %d)\n%s", filepath.Base(ctl), id, out, errOut, code, c.logs())
			}
		}
		drained := time.Since(stepAt)
		if err := n.stop(); err != nil {
			t.Fatalf("SIGTERM %s: %v\n%s", id, err, n.log())
		}
		stopped := time.Since(stepAt)
		n.bin = ""
		n.start()
		started := time.Since(stepAt)
		c.waitBalanced((i+1)%3, ids, 60*time.Second)
		t.Logf("FIGURE upgrade of %s: drained (%s) at %v, stopped at %v, new node serving at %v, balanced at %v",
			id, out, drained.Round(time.Millisecond), stopped.Round(time.Millisecond), started.Round(time.Millisecond), time.Since(stepAt).Round(time.Millisecond))
		waitCalls(100, "after the upgrade of "+id)
		if i == 0 {
			// A bid into the mixed cluster (one new node, two old).
			call("bid", func(ctx context.Context) error {
				return cl.Get("auctionActor", "sold").Send(ctx, "bids", map[string]any{"amount": 100})
			})
			bidLate = time.Now().After(auctionsAt.Add(auctionTimeout - time.Second))
			// The mixed cluster moves partitions both ways: node1, now
			// new, hands what it wrote to the old node2 and node3 (as a
			// crash of it would) and takes it back.
			backAt := time.Now()
			if out, errOut, code := runRivetctl(t, bins.rivetctl, c.nodes[1].grpcAddr, "drain", "node1", "--wait", "60s"); code != 0 || !strings.Contains(out, "drained node1") {
				t.Fatalf("rivetctl drain node1 (new) to the old nodes: %q (stderr %q, exit %d)\n%s", out, errOut, code, c.logs())
			}
			waitCalls(50, "with node1 drained to the old nodes")
			if out, errOut, code := runRivetctl(t, bins.rivetctl, c.nodes[1].grpcAddr, "drain", "--undo", "node1"); code != 0 {
				t.Fatalf("rivetctl drain --undo node1: %q (stderr %q, exit %d)\n%s", out, errOut, code, c.logs())
			}
			c.waitBalanced(1, ids, 60*time.Second)
			t.Logf("FIGURE node1 (new) drained to node2 and node3 (old) and back in %v", time.Since(backAt).Round(time.Millisecond))
		}
		if i < 2 && format4Recorded() {
			t.Fatalf("%s recorded while %d nodes of the old release run", format4, 2-i)
		}
	}
	upTook := time.Since(upStart)
	for deadline := time.Now().Add(60 * time.Second); !format4Recorded(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 60s of the last node's upgrade\n%s", format4, c.logs())
		}
	}
	t.Logf("FIGURE storage format 4 recorded %v after the last node's upgrade", (time.Since(upStart) - upTook).Round(time.Millisecond))
	during := 0
	for _, at := range due {
		if at.After(upStart) && at.Before(upStart.Add(upTook)) {
			during++
		}
	}
	t.Logf("FIGURE %d of the 20 reminders came due during the upgrade; the auction's expiry came due %v after the upgrade began",
		during, auctionsAt.Add(auctionTimeout).Sub(upStart).Round(time.Millisecond))
	waitCalls(100, "after the upgrade")
	stopLoad()
	wg.Wait()
	t.Logf("FIGURE rolling upgrade of 3 nodes: %v; load: %d calls, %d transient errors (UNAVAILABLE or a timeout, after the client's retries), %d permanent; e.g. %q",
		upTook.Round(time.Millisecond), ld.calls.Load(), ld.transient.Load(), ld.permanent.Load(), ld.samples)
	if ld.permanent.Load() > 0 {
		t.Errorf("the load saw %d permanent errors during the upgrade, e.g. %q", ld.permanent.Load(), ld.samples)
	}

	// Every reminder fires once, not before its time.
	for i := range 20 {
		key := fmt.Sprintf("r%d", i)
		deadline := time.Now().Add(time.Until(due[key]) + 30*time.Second)
		for {
			var st seed.ReminderState
			_, ok := inspectState(t, c.nodes[i%3], "reminderActor", key, &st)
			if ok && len(st.Fired) > 0 {
				if len(st.Fired) != 1 || st.Fired[0] != key {
					t.Errorf("reminder %s fired %q, want [%s] once", key, st.Fired, key)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reminder %s (due at +%v) did not fire within 30s of its time\n%s", key, due[key].Sub(sentAt), c.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The auctions end with the seed's results, each external call once.
	for key, want := range map[string]string{"expires": "expired", "sold": "sold"} {
		deadline := time.Now().Add(auctionTimeout + 30*time.Second)
		for {
			var st seed.AuctionState
			if _, ok := inspectState(t, c.nodes[0], "auctionActor", key, &st); ok && st.Result != nil {
				switch {
				case *st.Result == want:
				case key == "sold" && bidLate && *st.Result == "expired":
					t.Logf("auction sold expired: its bid was sent %v after it began, near its %v timeout (a slow machine)", time.Since(auctionsAt).Round(time.Millisecond), auctionTimeout)
				default:
					t.Errorf("auction %s: result %q, want %q", key, *st.Result, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("auction %s did not end\n%s", key, c.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	posts := map[string]int{}
	for _, p := range api.Posts() {
		posts[p.Path]++
	}
	if posts["/auctions/item-123"] != 2 || posts["/auctions/item-123/finalize"] != 2 {
		t.Errorf("the auctions' POSTs = %v, want list-item and finalize twice each (once per auction)", posts)
	}

	// Reminders settled: none fires a second time (a duplicate from a
	// handoff would show by now, every one being past its time).
	for i := range 20 {
		key := fmt.Sprintf("r%d", i)
		var st seed.ReminderState
		if _, ok := inspectState(t, c.nodes[(i+1)%3], "reminderActor", key, &st); !ok || len(st.Fired) != 1 {
			t.Errorf("reminder %s: fired %q once settled, want [%s]", key, st.Fired, key)
		}
	}
	// Its history has the step that recorded it once, not before its
	// time; how late the step ran is the figure of timers across the
	// upgrade.
	var late, lateMax time.Duration
	for i := range 20 {
		key := fmt.Sprintf("r%d", i)
		var h client.History
		call("history of "+key, func(ctx context.Context) error {
			var err error
			h, err = cl.Actor("reminderActor", key).NoCreate().History(ctx)
			return err
		})
		var records []client.HistoryEntry
		for _, e := range h.Entries {
			if strings.HasSuffix(e.Path, "record-reminder") && e.Status == "completed" {
				records = append(records, e)
			}
		}
		if len(records) != 1 {
			t.Errorf("reminder %s: %d completed record-reminder steps in its history, want 1: %+v", key, len(records), h.Entries)
			continue
		}
		d := records[0].UpdatedAt.Sub(due[key].Truncate(time.Millisecond))
		if d < 0 {
			t.Errorf("reminder %s recorded at %v, %v before its time", key, records[0].UpdatedAt, -d)
		}
		late += d
		lateMax = max(lateMax, d)
	}
	t.Logf("FIGURE reminders: recorded on average %v after their time, at most %v", (late / 20).Round(time.Millisecond), lateMax.Round(time.Millisecond))

	// Counts: the known ones as they were; the load's equal to what was
	// acknowledged, plus at most the calls whose outcome is unknown.
	getCount := func(key string) int {
		t.Helper()
		var got int
		call("getCount "+key, func(ctx context.Context) error {
			out, err := cl.Get("counter", key).Call(ctx, "getCount")
			if err != nil {
				return err
			}
			return json.Unmarshal(out, &got)
		})
		return got
	}
	for key, want := range known {
		if got := getCount(key); got != want {
			t.Errorf("counter %s = %d after the upgrade, want %d", key, got, want)
		}
	}
	var total, unknown int
	for key, n := range ld.acked {
		got := getCount(key)
		total += n
		unknown += ld.unknown[key]
		if got < n || got > n+ld.unknown[key] {
			t.Errorf("counter %s = %d, want the %d acknowledged increments (plus up to %d whose outcome is unknown)", key, got, n, ld.unknown[key])
		}
	}
	t.Logf("FIGURE load counters: %d acknowledged increments over %d keys, %d of unknown outcome", total, len(ld.acked), unknown)

	refused("after the upgrade")

	// rivetctl members shows the three nodes, alive, with this release's
	// CLI and the old one's.
	for _, ctl := range []string{bins.rivetctl, oldCtl} {
		membersAlive(t, ctl, c.nodes[0].grpcAddr, ids)
	}
	t.Logf("FIGURE whole test %v", time.Since(t0).Round(time.Millisecond))
	if t.Failed() {
		t.Log(c.logs())
	}
}

// membersAlive waits until `rivetctl members` (the binary ctl) lists
// every node of ids alive.
func membersAlive(t *testing.T, ctl, addr string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, code := runRivetctl(t, ctl, addr, "members")
		alive := 0
		for _, id := range ids {
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, id+" ") && strings.Contains(line, "alive") {
					alive++
				}
			}
		}
		if code == 0 && alive == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s members: %q (stderr %q, exit %d), want %v alive", filepath.Base(ctl), out, errOut, code, ids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
