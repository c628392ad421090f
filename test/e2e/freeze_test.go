package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/exampleapi"
)

// freezeReply is one answer the test got to a call.
type freezeReply struct {
	key  string
	val  int
	err  error
	sent time.Time
	at   time.Time
}

// A node process frozen (SIGSTOP: a long GC pause, a frozen VM) for longer
// than its lease TTL, while the other nodes take its partitions, serve
// writes to its actors and fire their timers, and then resumed (SIGCONT),
// acts on none of what it remembers: calls it had taken in while frozen
// (read-only ones included) are refused (UNAVAILABLE) or answered by the
// new owner, never from its stale memory; the workflow timers that came
// due while it was frozen run no step body on it (the step's POST reaches
// only the new owner's API server); none of its late writes lands, and no
// two writers ever acknowledge the same count.
func TestFrozenNodeServesNothingStaleAfterItsLeaseRanOut(t *testing.T) {
	const auctionTimeout = 15 * time.Second
	apis := make([]*exampleapi.TestServer, 3)
	for i := range apis {
		apis[i] = exampleapi.NewTestServer(nil)
		defer apis[i].Close()
	}
	c := newClusterWith(t, 3, func(i int, n *nodeProc) {
		n.env = []string{exampleapi.EnvVar + "=" + apis[i-1].URL, fmt.Sprintf("%s=%v", "EXAMPLES_AUCTION_TIMEOUT", auctionTimeout)}
	}, "--lease-ttl", "2s")
	ids := []string{"node1", "node2", "node3"}
	tab := c.waitBalanced(0, ids, 60*time.Second)
	// The frozen node's etcd member must not lead: freezing the leader
	// adds an election and etcd's lease extension on promotion to the
	// takeover, which this test does not need to wait out.
	victim := 2
	if c.etcdLeader() == "node3" {
		victim = 1
	}
	vid := ids[victim]
	vn := c.nodes[victim]
	own := ownersOf(tab)
	isVictim := func(o string) bool { return o == vid }
	var readKeys []string
	for i := range 4 {
		readKeys = append(readKeys, own.key(t, "counter", fmt.Sprintf("r%d-", i), isVictim))
	}
	lateKey := own.key(t, "counter", "late", isVictim)
	loopKey := own.key(t, "counter", "loop", isVictim)
	var auctions []string
	for i := range 3 {
		auctions = append(auctions, own.key(t, "auctionActor", fmt.Sprintf("a%d-", i), isVictim))
	}

	cl := c.client(0) // node1 survives (victim is node2 or node3)
	vcl, err := client.New(vn.grpcAddr, client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer vcl.Close()
	ctx := context.Background()
	call := func(cli *client.Client, key, action string, timeout time.Duration, args ...any) (int, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if action == "increment" {
			return rivet.Call[int](cctx, cli.GetOrCreate("counter", key), action, args...)
		}
		return rivet.Call[int](cctx, cli.Get("counter", key), action, args...)
	}

	// Every acknowledged increment, by key: a count acknowledged twice
	// means two writers.
	var (
		ackMu sync.Mutex
		acked = map[string][]int{}
	)
	ack := func(key string, v int) {
		ackMu.Lock()
		acked[key] = append(acked[key], v)
		ackMu.Unlock()
	}

	// Each counter is in the victim's memory at 1.
	for _, k := range append(append([]string{}, readKeys...), lateKey) {
		v, err := call(vcl, k, "increment", 10*time.Second, 1)
		if err != nil || v != 1 {
			t.Fatalf("increment %s on %s = %d, %v; want 1", k, vid, v, err)
		}
		ack(k, v)
	}
	// Auctions whose timeout sleeps in the victim's memory.
	for _, k := range auctions {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := vcl.Create(cctx, "auctionActor", []string{k}, nil)
		cancel()
		if err != nil {
			t.Fatalf("create auction %s on %s: %v", k, vid, err)
		}
	}
	for _, k := range auctions {
		waitHistory(t, vn, "auctionActor", k, "auction-timeout", "pending", 20*time.Second)
	}

	// Writes to the victim in a loop, from before the freeze to after the
	// resume: one is likely in its turn or its commit when it stops.
	loopCtx, stopLoop := context.WithCancel(ctx)
	var (
		loopWG       sync.WaitGroup
		loopAttempts int
		loopReplies  []freezeReply
	)
	loopWG.Add(1)
	go func() {
		defer loopWG.Done()
		for i := 0; i < 100000 && loopCtx.Err() == nil; i++ {
			sent := time.Now()
			ackMu.Lock()
			loopAttempts++ // before it is sent: one cut short may land
			ackMu.Unlock()
			cctx, cancel := context.WithTimeout(loopCtx, 40*time.Second)
			v, err := rivet.Call[int](cctx, vcl.GetOrCreate("counter", loopKey), "increment", 1)
			cancel()
			if loopCtx.Err() != nil && err != nil {
				return
			}
			ackMu.Lock()
			loopReplies = append(loopReplies, freezeReply{key: loopKey, val: v, err: err, sent: sent, at: time.Now()})
			ackMu.Unlock()
			if err == nil {
				ack(loopKey, v)
			}
			select {
			case <-loopCtx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	defer func() { stopLoop(); loopWG.Wait() }()
	// Some writes land before the freeze.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ackMu.Lock()
		n := len(acked[loopKey])
		ackMu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write to %s acknowledged by %s within 20 s\n%s", loopKey, vid, vn.log())
		}
	}

	finalizes := func(s *exampleapi.TestServer) int {
		n := 0
		for _, p := range s.Posts() {
			if strings.HasSuffix(p.Path, "/finalize") {
				n++
			}
		}
		return n
	}

	pid := vn.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	if n := finalizes(apis[victim]); n != 0 {
		t.Fatalf("the machine is too slow for this test: %d auctions finalized on %s before the freeze (timeout %v)", n, vid, auctionTimeout)
	}

	// The survivors take the victim's partitions and count on from what
	// was committed.
	var served time.Duration
	for _, k := range append(append([]string{}, readKeys...), lateKey) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			v, err := call(cl, k, "increment", 5*time.Second, 1)
			if err == nil {
				if v != 2 {
					t.Fatalf("increment of %s on the new owner = %d, want 2", k, v)
				}
				ack(k, v)
				if served == 0 {
					served = time.Since(stoppedAt)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not served by the survivors within 60 s of the freeze: %v\n%s", k, err, c.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for range 3 {
		v, err := call(cl, loopKey, "increment", 10*time.Second, 1)
		if err != nil {
			t.Fatalf("increment %s on the new owner: %v", loopKey, err)
		}
		ack(loopKey, v)
	}
	// The auctions' timers fire on the new owners, which finalize them.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := 0
		for i, s := range apis {
			if i != victim {
				n += finalizes(s)
			}
		}
		if n >= len(auctions) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d auctions finalized by the survivors within 60 s of the freeze\n%s", n, len(auctions), c.logs())
		}
	}

	// Calls sent to the frozen node: the kernel takes them in on its
	// connection; the node reads them as it resumes, before it may have
	// noticed that its lease is gone.
	replies := make(chan freezeReply, 3*len(readKeys)+1)
	var wg sync.WaitGroup
	send := func(key, action string, args ...any) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			v, err := call(vcl, key, action, 30*time.Second, args...)
			replies <- freezeReply{key: key, val: v, err: err, sent: sent, at: time.Now()}
		}()
	}
	for _, k := range readKeys {
		send(k, "getCount")
		send(k, "getCount")
	}
	send(lateKey, "increment", 1)
	for _, k := range readKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var st struct{ Count int }
			ins, err := vcl.Actor("counter", k).NoCreate().Inspect(cctx)
			if err == nil {
				err = json.Unmarshal(ins.State, &st)
			}
			replies <- freezeReply{key: k + " (inspect)", val: st.Count, err: err, sent: sent, at: time.Now()}
		}()
	}
	// Long enough for the client to write the requests to the socket.
	time.Sleep(300 * time.Millisecond)
	frozenFor := time.Since(stoppedAt)
	contAt := time.Now() // the node runs again no sooner than this
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	wg.Wait()
	close(replies)

	var got []string
	for r := range replies {
		d := r.at.Sub(contAt).Round(time.Millisecond)
		switch {
		case r.err == nil && r.key == lateKey:
			// Only the new owner may acknowledge it: it counts on from 2.
			if r.val != 3 {
				t.Errorf("late increment of %s sent to %s while frozen = %d, want 3 (the new owner's) or an error", r.key, vid, r.val)
			}
			ack(r.key, r.val)
			got = append(got, fmt.Sprintf("increment %d at +%v", r.val, d))
		case r.err == nil:
			if r.val < 2 {
				t.Errorf("STALE READ: getCount of %s from %s %v after its resume = %d; the new owner had acknowledged 2 before the call was sent", r.key, vid, d, r.val)
			}
			got = append(got, fmt.Sprintf("%s %d at +%v", r.key, r.val, d))
		case errors.Is(r.err, rivet.ErrUnavailable):
			got = append(got, fmt.Sprintf("%s UNAVAILABLE at +%v", r.key, d))
		default:
			// A deadline or a broken connection is no stale answer, but
			// not the prompt refusal wanted either.
			t.Errorf("call on %s sent to %s while frozen failed with %v (%v after the resume), want UNAVAILABLE or the new owner's answer", r.key, vid, r.err, d)
		}
	}
	sort.Strings(got)
	t.Logf("calls taken in while frozen: %s", strings.Join(got, "; "))

	// Reads through the resumed node until one is answered (forwarded, or
	// served again after a handoff back): never an old count.
	var firstOK time.Duration
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := call(vcl, readKeys[0], "getCount", 5*time.Second)
		if err == nil {
			if v != 2 {
				t.Fatalf("STALE READ: getCount of %s from %s %v after its resume = %d, want 2", readKeys[0], vid, time.Since(contAt), v)
			}
			firstOK = time.Since(contAt)
			break
		}
		if !errors.Is(err, rivet.ErrUnavailable) && !errors.Is(err, rivet.ErrTimeout) {
			t.Logf("getCount through %s: %v", vid, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s answered no read within 60 s of its resume: %v\n%s", vid, err, vn.log())
		}
	}

	// The resumed node noticed the loss of its lease.
	var lostAfter time.Duration
	for deadline := time.Now().Add(30 * time.Second); lostAfter == 0; time.Sleep(50 * time.Millisecond) {
		for _, ts := range logTimes(t, vn, "lease lost: dropping every partition claim") {
			if at := time.Unix(0, int64(ts*1e9)); at.After(stoppedAt) {
				lostAfter = at.Sub(contAt)
				break
			}
		}
		if lostAfter == 0 && time.Now().After(deadline) {
			t.Fatalf("%s never logged the loss of its lease after its resume\n%s", vid, vn.log())
		}
	}

	// Settle: the victim is back in the ring and has taken its share
	// again; the write loop stops.
	c.waitBalanced(0, ids, 90*time.Second)
	stopLoop()
	loopWG.Wait()

	if n := finalizes(apis[victim]); n != 0 {
		t.Errorf("STALE STEP: %s ran %d finalize step bodies of auctions whose partitions had moved (their timers came due while it was frozen)", vid, n)
	}
	total := 0
	for _, s := range apis {
		total += finalizes(s)
	}
	if total != len(auctions) {
		t.Errorf("%d finalize POSTs in all, want %d (one per auction)", total, len(auctions))
	}
	for _, k := range auctions {
		var st struct{ Result *string }
		if _, ok := inspectState(t, c.nodes[0], "auctionActor", k, &st); !ok || st.Result == nil || *st.Result != "expired" {
			t.Errorf("auction %s: result %v (read %v), want expired", k, st.Result, ok)
		}
	}

	// No acknowledged count twice (two writers), none lost, none that
	// was not attempted.
	ackMu.Lock()
	defer ackMu.Unlock()
	var lateAcks []string
	for _, r := range loopReplies {
		if r.err == nil && r.at.After(contAt) && r.sent.Before(contAt) {
			lateAcks = append(lateAcks, fmt.Sprintf("%d sent %v after SIGSTOP, answered %v after SIGCONT", r.val, r.sent.Sub(stoppedAt).Round(time.Millisecond), r.at.Sub(contAt).Round(time.Millisecond)))
		}
	}
	for k, vs := range acked {
		sort.Ints(vs)
		for i := 1; i < len(vs); i++ {
			if vs[i] == vs[i-1] {
				t.Errorf("TWO WRITERS: count %d of %s acknowledged twice (acknowledged counts %v)", vs[i], k, vs)
			}
		}
		final, err := call(cl, k, "getCount", 10*time.Second)
		if err != nil {
			t.Fatalf("getCount %s: %v", k, err)
		}
		if final < vs[len(vs)-1] || final < len(vs) {
			t.Errorf("LOST WRITE: %s counts %d, but %d increments were acknowledged, up to %d", k, final, len(vs), vs[len(vs)-1])
		}
		if k != loopKey && final != len(vs) {
			t.Errorf("%s counts %d, want the %d acknowledged increments", k, final, len(vs))
		}
		if k == loopKey && final > loopAttempts+3 {
			t.Errorf("%s counts %d: more than the %d increments attempted", k, final, loopAttempts+3)
		}
	}
	// Writes the resumed node tried on its old claims (a workflow's
	// record of a timer that came due while it was frozen, say): refused
	// by the fence in etcd.
	fenced := 0
	for _, line := range strings.Split(readLog(t, vn), "\n") {
		if strings.Contains(line, "storage: fenced") {
			fenced++
			if fenced <= 5 {
				t.Logf("refused by the fence on %s: %.300s", vid, line)
			}
		}
	}
	loopErrs := 0
	for _, r := range loopReplies {
		if r.err != nil {
			loopErrs++
		}
	}
	t.Logf("FIGURE freeze: %s frozen %v (lease TTL 2 s); survivors served its actors %v after SIGSTOP; after SIGCONT it logged its lease lost at +%v, answered a read (forwarded or its own again) at +%v; write loop: %d attempts, %d errors, acknowledged after the resume though sent before it: %v; log lines of writes refused by the fence: %d",
		vid, frozenFor.Round(time.Millisecond), served.Round(time.Millisecond), lostAfter.Round(time.Millisecond), firstOK.Round(time.Millisecond), loopAttempts, loopErrs, lateAcks, fenced)
	if t.Failed() {
		t.Log(c.logs())
	}
}

// readLog returns the whole log of n.
func readLog(t *testing.T, n *nodeProc) string {
	t.Helper()
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
