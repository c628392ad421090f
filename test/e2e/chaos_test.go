package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/exampleapi"
)

var chaosBin struct {
	once sync.Once
	path string
	err  error
}

// chaosNodeBinary builds ./chaosnode (cmd/node with the chaosFlow and completer actors)
// once for the package.
func chaosNodeBinary(t *testing.T) string {
	t.Helper()
	chaosBin.once.Do(func() {
		chaosBin.path = filepath.Join(bins.dir, "chaosnode")
		out, err := exec.Command("go", "build", "-o", chaosBin.path, "./chaosnode").CombinedOutput()
		if err != nil {
			chaosBin.err = fmt.Errorf("build chaosnode: %v\n%s", err, out)
		}
	})
	if chaosBin.err != nil {
		t.Fatal(chaosBin.err)
	}
	return chaosBin.path
}

// effectHit is one POST of a chaosFlow step's side effect.
type effectHit struct {
	seq   int
	nonce string
	inc   string // the node process that made it: node2#3
	at    time.Time
}

// effectServer records the chaosFlow steps' side effects by "job/step".
type effectServer struct {
	*httptest.Server
	mu   sync.Mutex
	seq  int
	hits map[string][]effectHit
}

func newEffectServer() *effectServer {
	s := &effectServer{hits: map[string][]effectHit{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/effects/"), "/")
		if r.Method != http.MethodPost || len(parts) != 2 {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		s.mu.Lock()
		s.seq++
		k := parts[0] + "/" + parts[1]
		s.hits[k] = append(s.hits[k], effectHit{seq: s.seq, nonce: r.URL.Query().Get("nonce"), inc: r.URL.Query().Get("inc"), at: time.Now()})
		s.mu.Unlock()
	}))
	return s
}

func (s *effectServer) get(k string) []effectHit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hits[k])
}

// chaosFlowState mirrors chaosnode's FlowState.
type chaosFlowState struct {
	Nonces   map[string]string `json:"nonces"`
	Consumed []string          `json:"consumed"`
}

// keyedSend is what the test learnt of one idempotent send.
type keyedSend struct {
	actor, key, queue, idem string
	body                    any
	attempts                int
	unknown                 int // attempts whose outcome is unknown
	sureNot                 int // attempts that certainly did not run
	accepted                bool
	duplicate               bool // the accepting answer said duplicate
	firstID                 uint64
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: want seconds or a duration", name, v)
	}
	return d
}

// A 3-node cluster (3 etcd members) runs a mixed workload while a seeded
// schedule kill -9s one node at a time and restarts it with the same data
// dir and flags after a random delay (sometimes killing it again as it
// starts, or killing another node just after one is back, mid-handoff).
// During the chaos: no counter read goes below a count acknowledged or read
// before it started. Then, once everything settled:
//   - each counter's value is within [acknowledged, acknowledged+unknown],
//     and no count was acknowledged twice (two writers);
//   - each idempotent send was queued once and consumed once, in order
//     (chaosFlow jobs, reminders, coordinator tasks, scatter inputs);
//   - each reminder fired once, none before its time; each session's
//     scheduled expire ran once, after its time;
//   - each chaosFlow step's side effect ran at least once and never again
//     once the attempt that committed had run (an attempt interrupted before
//     its commit may have run before it: docs/architecture.md, steps run
//     again after a crash);
//   - the coordinator and scatter-gather workflows reached their results;
//     an auction is sold only with a bid, and is sold if its bid was
//     acknowledged before its timeout could have run out.
//
// RIVET_CHAOS_SECONDS sets the chaos time (default 15 s: CI runs it
// beside the other packages' tests), RIVET_CHAOS_SEED replays a kill schedule (the victims and delays; the workload's timing
// differs), RIVET_CHAOS_KEEP=1 keeps the nodes' logs.
func TestChaosKill9MixedWorkload(t *testing.T) {
	chaosFor := envDuration(t, "RIVET_CHAOS_SECONDS", 15*time.Second)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RIVET_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RIVET_CHAOS_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("chaos seed %d (RIVET_CHAOS_SEED=%d replays the schedule), chaos for %v", seed, seed, chaosFor)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	root, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node data and logs under %s (kept if the test fails, or with RIVET_CHAOS_KEEP=1)", root)
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("RIVET_CHAOS_KEEP") == "" {
			os.RemoveAll(root)
		}
	})

	bin := chaosNodeBinary(t)
	api := exampleapi.NewTestServer(nil)
	defer api.Close()
	fx := newEffectServer()
	defer fx.Close()

	const auctionTimeout = 3 * time.Second
	incarnation := make([]int, 3)
	setEnv := func(i int, n *nodeProc) {
		incarnation[i]++
		n.env = []string{
			exampleapi.EnvVar + "=" + api.URL,
			"CHAOS_EFFECTS_URL=" + fx.URL,
			fmt.Sprintf("EXAMPLES_AUCTION_TIMEOUT=%v", auctionTimeout),
			fmt.Sprintf("CHAOS_INCARNATION=node%d#%d", i+1, incarnation[i]),
		}
	}
	c := newClusterWith(t, 3, func(i int, n *nodeProc) {
		n.bin = bin
		n.dataDir = filepath.Join(root, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.logPath = filepath.Join(n.dataDir, "node.log")
		setEnv(i-1, n)
	}, "--lease-ttl", envOr("RIVET_CHAOS_LEASE_TTL", "3s"))
	ids := []string{"node1", "node2", "node3"}
	c.waitBalanced(0, ids, 60*time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("logs under %s; tails:\n%s", root, c.logs())
		}
	}()

	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.grpcAddr)
	}
	newClient := func(first int) *client.Client {
		var a []string
		for j := range addrs {
			a = append(a, addrs[(first+j)%len(addrs)])
		}
		cl, err := client.New(strings.Join(a, ","))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}

	chaosCtx, endChaos := context.WithCancel(context.Background())
	defer endChaos()
	var wg sync.WaitGroup

	// Counters: increments through the nodes in turn.
	counterKeys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	var (
		cmu      sync.Mutex
		acked    = map[string]int{}
		unknown  = map[string]int{}
		ackVals  = map[string][]int{}
		maxAck   = map[string]int{}
		notRun   atomic.Int64
		incCalls atomic.Int64
		reads    atomic.Int64
		readErrs []string
	)
	// A read never goes back: not below a count acknowledged before it
	// started, nor below what an earlier read returned.
	{
		cl := newClient(2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lastRead := map[string]int{}
			for i := 0; i < 100000 && chaosCtx.Err() == nil; i++ {
				k := counterKeys[i%len(counterKeys)]
				cmu.Lock()
				floor := max(maxAck[k], lastRead[k])
				cmu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				v, err := rivet.Call[int](ctx, cl.Get("counter", k), "getCount")
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				reads.Add(1)
				if v < floor {
					cmu.Lock()
					readErrs = append(readErrs, fmt.Sprintf("%s: read %d at %s, after %d was acknowledged or read", k, v, time.Now().Format("15:04:05.000"), floor))
					cmu.Unlock()
				}
				lastRead[k] = max(lastRead[k], v)
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	for w := range 3 {
		cl := newClient(w)
		wrng := rand.New(rand.NewPCG(seed, uint64(100+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && chaosCtx.Err() == nil; i++ {
				k := counterKeys[wrng.IntN(len(counterKeys))]
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				v, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", k), "increment", 1)
				cancel()
				incCalls.Add(1)
				cmu.Lock()
				switch {
				case err == nil:
					acked[k]++
					ackVals[k] = append(ackVals[k], v)
					maxAck[k] = max(maxAck[k], v)
				case rivet.OutcomeUnknown(err):
					unknown[k]++
				default:
					notRun.Add(1)
				}
				cmu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}

	// Idempotent sends, each retried with its key until accepted.
	var (
		smu   sync.Mutex
		sends []*keyedSend
	)
	sendOnce := func(cl *client.Client, s *keyedSend, until time.Time) {
		for time.Now().Before(until) {
			s.attempts++
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			res, err := rivet.SendWith(ctx, cl.GetOrCreate(s.actor, s.key), s.queue, s.body, rivet.SendOptions{IdempotencyKey: s.idem})
			cancel()
			if err == nil {
				smu.Lock()
				s.accepted, s.duplicate, s.firstID = true, res.Duplicate, res.MessageID
				smu.Unlock()
				return
			}
			smu.Lock()
			if rivet.OutcomeUnknown(err) {
				s.unknown++
			} else {
				s.sureNot++
			}
			smu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}
	sender := func(w int, pace time.Duration, next func(i int, r *rand.Rand) *keyedSend) {
		cl := newClient(w)
		srng := rand.New(rand.NewPCG(seed, uint64(200+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000 && chaosCtx.Err() == nil; i++ {
				s := next(i, srng)
				smu.Lock()
				sends = append(sends, s)
				smu.Unlock()
				// A send started during the chaos is retried past it, for a while.
				sendOnce(cl, s, time.Now().Add(chaosFor+40*time.Second))
				time.Sleep(pace)
			}
		}()
	}
	flowKeys := []string{"f0", "f1", "f2", "f3"}
	sender(0, 80*time.Millisecond, func(i int, r *rand.Rand) *keyedSend {
		id := fmt.Sprintf("j%d", i)
		return &keyedSend{actor: "chaosFlow", key: flowKeys[r.IntN(len(flowKeys))], queue: "jobs", idem: "job-" + id, body: map[string]string{"id": id}}
	})
	sender(4, 120*time.Millisecond, func(i int, r *rand.Rand) *keyedSend {
		id := fmt.Sprintf("x%d", i)
		return &keyedSend{actor: "chaosFlow", key: flowKeys[r.IntN(len(flowKeys))], queue: "jobs", idem: "job-" + id, body: map[string]string{"id": id}}
	})
	reminderKeys := []string{"r0", "r1", "r2"}
	var lastAt atomic.Int64
	sender(1, 200*time.Millisecond, func(i int, r *rand.Rand) *keyedSend {
		at := time.Now().Add(time.Duration(r.IntN(6000)) * time.Millisecond).UnixMilli()
		lastAt.Store(max(lastAt.Load(), at))
		return &keyedSend{actor: "reminderActor", key: reminderKeys[r.IntN(len(reminderKeys))], queue: "reminders", idem: fmt.Sprintf("rem-%d", i),
			body: map[string]any{"text": fmt.Sprintf("rem-%d", i), "at": at}}
	})
	// Reminders: when each was first seen fired, to compare with its time.
	var (
		rmu     sync.Mutex
		remSeen = map[string]time.Time{}
	)
	{
		cl := newClient(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && chaosCtx.Err() == nil; i++ {
				k := reminderKeys[i%len(reminderKeys)]
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				st, err := rivet.Call[struct{ Fired []string }](ctx, cl.Get("reminderActor", k), "getState")
				cancel()
				now := time.Now()
				if err == nil {
					rmu.Lock()
					for _, f := range st.Fired {
						if _, ok := remSeen[f]; !ok {
							remSeen[f] = now
						}
					}
					rmu.Unlock()
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	sender(2, 250*time.Millisecond, func(i int, r *rand.Rand) *keyedSend {
		return &keyedSend{actor: "coordinatorActor", key: "co0", queue: "task", idem: fmt.Sprintf("task-%d", i),
			body: map[string]any{"taskId": fmt.Sprintf("t%d", i), "workerId": fmt.Sprintf("w%d", r.IntN(10)), "value": i + 1}}
	})
	sender(3, 300*time.Millisecond, func(i int, r *rand.Rand) *keyedSend {
		return &keyedSend{actor: "scatterGatherActor", key: "sg0", queue: "scatter", idem: fmt.Sprintf("sc-%d", i), body: map[string]any{"input": i + 1}}
	})

	// Auctions (a race of a bid against a timeout): created during the
	// chaos, half of them bid on at a random moment.
	type auction struct {
		key       string
		created   time.Time // before the call that creates it
		bid       *keyedSend
		bidAcked  time.Time
		createErr error
		result    string
	}
	var (
		amu      sync.Mutex
		auctions []*auction
	)
	{
		cl := newClient(0)
		// The bids' clients, made here: newClient may end the test, which
		// only the test's goroutine may do.
		bidClients := []*client.Client{newClient(0), newClient(1), newClient(2)}
		arng := rand.New(rand.NewPCG(seed, 300))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bwg sync.WaitGroup
			defer bwg.Wait()
			for i := 0; i < 1000 && chaosCtx.Err() == nil; i++ {
				a := &auction{key: fmt.Sprintf("a%d", i), created: time.Now()}
				var err error
				for try := 0; try < 20; try++ {
					ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
					_, err = rivet.Call[json.RawMessage](ctx, cl.GetOrCreate("auctionActor", a.key), "getState")
					cancel()
					if err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				a.createErr = err
				amu.Lock()
				auctions = append(auctions, a)
				amu.Unlock()
				if err == nil && arng.IntN(2) == 0 {
					delay := time.Duration(arng.IntN(5000)) * time.Millisecond
					bcl := bidClients[i%len(bidClients)]
					bwg.Add(1)
					go func() {
						defer bwg.Done()
						time.Sleep(delay)
						b := &keyedSend{actor: "auctionActor", key: a.key, queue: "bids", idem: "bid-" + a.key, body: map[string]any{"amount": 100}}
						sendOnce(bcl, b, time.Now().Add(chaosFor+40*time.Second))
						amu.Lock()
						a.bid, a.bidAcked = b, time.Now()
						amu.Unlock()
					}()
				}
				time.Sleep(time.Duration(300+arng.IntN(800)) * time.Millisecond)
			}
		}()
	}

	// Sessions (a scheduled call): each touched once, so each expires
	// once, after its time.
	type sessionState struct {
		Active    bool  `json:"active"`
		Touches   int   `json:"touches"`
		Expired   int   `json:"expired"`
		ExpiresAt int64 `json:"expiresAt"`
		ExpiredAt int64 `json:"expiredAt"`
	}
	var (
		sessMu   sync.Mutex
		sessions []string
		sessErrs []string
	)
	{
		cl := newClient(1)
		srng := rand.New(rand.NewPCG(seed, 400))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000 && chaosCtx.Err() == nil; i++ {
				key := fmt.Sprintf("s%d", i)
				ttl := int64(500 + srng.IntN(4000))
				touched := false
				for try := 0; try < 40 && !touched; try++ {
					ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
					_, err := rivet.Call[sessionState](ctx, cl.GetOrCreate("sessionActor", key), "touch", ttl)
					if err != nil && rivet.OutcomeUnknown(err) {
						// Did it apply? Read before touching again.
						st, rerr := rivet.Call[sessionState](ctx, cl.GetOrCreate("sessionActor", key), "getState")
						err = rerr
						touched = rerr == nil && st.Touches > 0
					} else {
						touched = err == nil
					}
					cancel()
					if !touched {
						time.Sleep(200 * time.Millisecond)
					}
				}
				sessMu.Lock()
				if touched {
					sessions = append(sessions, key)
				} else {
					sessErrs = append(sessErrs, key)
				}
				sessMu.Unlock()
				time.Sleep(time.Duration(200+srng.IntN(600)) * time.Millisecond)
			}
		}()
	}

	// The chaos: one node down at a time.
	type killRec struct {
		inc      string
		at, back time.Time
	}
	var kills []killRec
	chaosEnd := time.Now().Add(chaosFor)
	prev := -1
	for len(kills) < 1000 && time.Now().Before(chaosEnd) {
		i := rng.IntN(3)
		if prev >= 0 && rng.IntN(3) == 0 {
			// Another node, as the one just back takes its partitions
			// back: a donor killed mid-handoff.
			time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
			i = (prev + 1 + rng.IntN(2)) % 3
		} else {
			time.Sleep(time.Duration(800+rng.IntN(2500)) * time.Millisecond)
		}
		prev = i
		down := time.Duration(200+rng.IntN(2500)) * time.Millisecond
		n := c.nodes[i]
		rec := killRec{inc: fmt.Sprintf("node%d#%d", i+1, incarnation[i]), at: time.Now()}
		n.kill()
		t.Logf("+%5.1fs kill -9 %s, down %v", time.Since(chaosEnd.Add(-chaosFor)).Seconds(), rec.inc, down)
		time.Sleep(down)
		setEnv(i, n)
		if rng.IntN(4) == 0 {
			// Killed again as it starts: mid-recovery (claiming its
			// partitions, loading their wakeups, replaying workflows).
			early := time.Duration(50+rng.IntN(1500)) * time.Millisecond
			n.launch()
			time.Sleep(early)
			rec.back = time.Now()
			kills = append(kills, rec)
			rec = killRec{inc: fmt.Sprintf("node%d#%d", i+1, incarnation[i]), at: time.Now()}
			n.kill()
			t.Logf("+%5.1fs kill -9 %s %v after its start", time.Since(chaosEnd.Add(-chaosFor)).Seconds(), rec.inc, early)
			time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
			setEnv(i, n)
		}
		n.start()
		rec.back = time.Now()
		kills = append(kills, rec)
	}
	endChaos()
	t.Logf("chaos over: %d kills; waiting for the workload to settle", len(kills))
	// A kill near an attempt interrupts it: its own node's, or another's
	// that leaves its commit in doubt (an etcd leader, the callee of a
	// cross-node call).
	killedNear := func(at time.Time) bool {
		for _, k := range kills {
			if k.at.After(at.Add(-time.Second)) && k.at.Before(at.Add(5*time.Second)) {
				return true
			}
		}
		return false
	}

	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(60 * time.Second):
		t.Fatalf("the workload did not stop within 60 s of the chaos's end")
	}
	quietFrom := time.Now()

	cl := newClient(0)
	call := func(actor, key, action string, into any) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := cl.Actor(actor, key).NoCreate().Call(ctx, action)
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, into)
	}

	// What each idempotent send target must end with.
	smu.Lock()
	byTarget := map[string][]*keyedSend{}
	for _, s := range sends {
		if !s.accepted {
			t.Errorf("send %s to %s %s never accepted in %d attempts (%d unknown, %d not run)", s.idem, s.actor, s.key, s.attempts, s.unknown, s.sureNot)
			continue
		}
		// A duplicate answer needs no unknown attempt of the test's: the
		// client retries a keyed send on UNAVAILABLE itself.
		byTarget[s.actor+"/"+s.key] = append(byTarget[s.actor+"/"+s.key], s)
	}
	smu.Unlock()
	if t.Failed() {
		t.FailNow()
	}

	// Settle: every workflow has taken what was sent to it.
	wantIDs := func(target string, field string) []string {
		var out []string
		for _, s := range byTarget[target] {
			out = append(out, s.body.(map[string]any)[field].(string))
		}
		return out
	}
	flowWant := map[string][]string{}
	for _, k := range flowKeys {
		// Two senders: the queue's order is the messages' IDs.
		slices.SortFunc(byTarget["chaosFlow/"+k], func(a, b *keyedSend) int { return int(a.firstID) - int(b.firstID) })
		for _, s := range byTarget["chaosFlow/"+k] {
			flowWant[k] = append(flowWant[k], s.body.(map[string]string)["id"])
		}
	}
	remWant := map[string][]string{}
	for _, k := range reminderKeys {
		remWant[k] = wantIDs("reminderActor/"+k, "text")
	}
	coordSends := byTarget["coordinatorActor/co0"]
	scatterSends := byTarget["scatterGatherActor/sg0"]

	flows := map[string]chaosFlowState{}
	rems := map[string][]string{}
	var coord struct {
		LastTaskID *string `json:"lastTaskId"`
		LastResult int     `json:"lastResult"`
	}
	var scatter struct {
		LastSum int `json:"lastSum"`
	}
	workflowOf := func(actor, key string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ins, err := cl.Actor(actor, key).NoCreate().Inspect(ctx)
		if err != nil {
			return fmt.Sprintf(" (inspect: %v)", err)
		}
		return fmt.Sprintf(" (workflow %s %s)", ins.WorkflowStatus, ins.WorkflowError)
	}
	settled := func() (bool, string) {
		for _, k := range flowKeys {
			var st chaosFlowState
			if len(flowWant[k]) == 0 {
				continue
			}
			if err := call("chaosFlow", k, "getState", &st); err != nil {
				return false, fmt.Sprintf("chaosFlow %s: %v", k, err)
			}
			flows[k] = st
			if len(st.Consumed) < len(flowWant[k]) {
				return false, fmt.Sprintf("chaosFlow %s consumed %d of %d%s", k, len(st.Consumed), len(flowWant[k]), workflowOf("chaosFlow", k))
			}
		}
		for _, k := range reminderKeys {
			var st struct{ Fired []string }
			if len(remWant[k]) == 0 {
				continue
			}
			if err := call("reminderActor", k, "getState", &st); err != nil {
				return false, fmt.Sprintf("reminderActor %s: %v", k, err)
			}
			rems[k] = st.Fired
			if len(st.Fired) < len(remWant[k]) {
				return false, fmt.Sprintf("reminderActor %s fired %d of %d%s", k, len(st.Fired), len(remWant[k]), workflowOf("reminderActor", k))
			}
		}
		if len(coordSends) > 0 {
			last := coordSends[len(coordSends)-1].body.(map[string]any)
			if err := call("coordinatorActor", "co0", "getState", &coord); err != nil {
				return false, fmt.Sprintf("coordinatorActor: %v", err)
			}
			if coord.LastTaskID == nil || *coord.LastTaskID != last["taskId"] {
				return false, fmt.Sprintf("coordinator at %v, want %v%s", coord.LastTaskID, last["taskId"], workflowOf("coordinatorActor", "co0"))
			}
		}
		if len(scatterSends) > 0 {
			last := scatterSends[len(scatterSends)-1].body.(map[string]any)
			if err := call("scatterGatherActor", "sg0", "getState", &scatter); err != nil {
				return false, fmt.Sprintf("scatterGatherActor: %v", err)
			}
			if scatter.LastSum != 30*last["input"].(int) {
				return false, fmt.Sprintf("scatter-gather lastSum %d, want %d%s", scatter.LastSum, 30*last["input"].(int), workflowOf("scatterGatherActor", "sg0"))
			}
		}
		for _, k := range sessions {
			var st sessionState
			if err := call("sessionActor", k, "getState", &st); err != nil {
				return false, fmt.Sprintf("sessionActor %s: %v", k, err)
			}
			if st.Expired == 0 {
				return false, fmt.Sprintf("session %s not expired yet", k)
			}
		}
		for _, a := range auctions {
			if a.createErr != nil || a.result != "" {
				continue
			}
			var st struct{ Result *string }
			if err := call("auctionActor", a.key, "getState", &st); err != nil {
				return false, fmt.Sprintf("auctionActor %s: %v", a.key, err)
			}
			if st.Result == nil {
				return false, fmt.Sprintf("auction %s has no result%s", a.key, workflowOf("auctionActor", a.key))
			}
			a.result = *st.Result
		}
		return true, ""
	}
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ok, why := settled()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within 45 s of the workload's end: %s", why)
		}
	}
	t.Logf("settled %.1fs after the workload's end", time.Since(quietFrom).Seconds())

	// Counters.
	var totalAcked, totalUnknown int
	for _, k := range counterKeys {
		var v int
		if err := call("counter", k, "getCount", &v); err != nil {
			if errors.Is(err, rivet.ErrNotFound) && acked[k] == 0 {
				continue
			}
			t.Fatalf("getCount %s: %v", k, err)
		}
		totalAcked += acked[k]
		totalUnknown += unknown[k]
		if v < acked[k] || v > acked[k]+unknown[k] {
			t.Errorf("counter %s = %d, want between %d acknowledged and %d (+%d unknown)", k, v, acked[k], acked[k]+unknown[k], unknown[k])
		}
		seen := map[int]bool{}
		for _, a := range ackVals[k] {
			if seen[a] {
				t.Errorf("counter %s: count %d acknowledged twice (two writers?)", k, a)
			}
			seen[a] = true
			if a > v {
				t.Errorf("counter %s: %d acknowledged, final %d (an acknowledged increment lost)", k, a, v)
			}
		}
	}

	// Jobs: each consumed once, in the order queued; each step's effect
	// ran, and never after the attempt that committed.
	var dups, dupsKilled int
	for _, k := range flowKeys {
		st := flows[k]
		if !slices.Equal(st.Consumed, flowWant[k]) {
			t.Errorf("chaosFlow %s consumed %v, want each of %v once, in order", k, st.Consumed, flowWant[k])
		}
		for _, job := range flowWant[k] {
			for _, step := range []string{"effect-a", "effect-b"} {
				id := job + "/" + step
				nonce := st.Nonces[id]
				hits := fx.get(id)
				at := slices.IndexFunc(hits, func(h effectHit) bool { return h.nonce == nonce })
				if nonce == "" || at < 0 {
					t.Errorf("%s %s: committed nonce %q, effects %+v: the committed attempt's effect is missing", k, id, nonce, hits)
					continue
				}
				if at != len(hits)-1 {
					t.Errorf("%s %s: the step's effect ran again after the attempt that committed: %+v (committed %s)", k, id, hits, nonce)
				}
				for _, h := range hits[:at] {
					dups++
					if killedNear(h.at) {
						dupsKilled++
					} else {
						// Allowed (a handoff or a re-fence stops a step in
						// flight too), but worth a look in the logs.
						t.Logf("%s %s: an attempt by %s at %s ran before the committing one (%s at %s), no kill near it",
							k, id, h.inc, h.at.Format("15:04:05.000"), hits[at].inc, hits[at].at.Format("15:04:05.000"))
					}
				}
			}
		}
	}
	// effect-b's call to a counter on (likely) another node went through.
	for _, k := range flowKeys {
		for _, job := range flowWant[k][:min(5, len(flowWant[k]))] {
			var v int
			if err := call("counter", "fx-"+job, "getCount", &v); err != nil || v < 1 {
				t.Errorf("counter fx-%s = %d, %v; want at least 1 (effect-b committed)", job, v, err)
			}
		}
	}
	// Reminders: each fired once.
	for _, k := range reminderKeys {
		got := slices.Sorted(slices.Values(rems[k]))
		want := slices.Sorted(slices.Values(remWant[k]))
		if !slices.Equal(got, want) {
			t.Errorf("reminderActor %s fired %v, want each of %v once", k, rems[k], remWant[k])
		}
	}
	// Auctions: sold only with a bid; a bid acknowledged before the
	// timeout could end (counted from before the auction's creation) sells.
	var sold, expired int
	for _, a := range auctions {
		if a.createErr != nil {
			t.Errorf("auction %s not created: %v", a.key, a.createErr)
			continue
		}
		switch {
		case a.result == "sold":
			sold++
			if a.bid == nil || !a.bid.accepted {
				t.Errorf("auction %s sold without a bid", a.key)
			}
		case a.result == "expired":
			expired++
			if a.bid != nil && a.bid.accepted && a.bidAcked.Before(a.created.Add(auctionTimeout)) {
				t.Errorf("auction %s expired though its bid was acknowledged at %s, %v after its creation began (timeout %v)",
					a.key, a.bidAcked.Format("15:04:05.000"), a.bidAcked.Sub(a.created), auctionTimeout)
			}
		default:
			t.Errorf("auction %s result %q", a.key, a.result)
		}
	}
	posts := map[string]int{}
	for _, p := range api.Posts() {
		posts[p.Path]++
	}
	if n := len(auctions); posts["/auctions/item-123"] < n || posts["/auctions/item-123/finalize"] < n {
		t.Errorf("%d auctions, POSTs %v: want list-item and finalize at least once each", n, posts)
	}
	t.Logf("%d auctions: %d sold, %d expired; POSTs %v", len(auctions), sold, expired, posts)

	// Sessions: each expired once, after its time.
	for _, k := range sessErrs {
		t.Errorf("session %s: no touch went through", k)
	}
	for _, k := range sessions {
		var st sessionState
		if err := call("sessionActor", k, "getState", &st); err != nil {
			t.Errorf("session %s: %v", k, err)
			continue
		}
		if st.Touches != 1 || st.Expired != 1 || st.Active || st.ExpiredAt < st.ExpiresAt {
			t.Errorf("session %s: %+v, want touched once, expired once, after its time", k, st)
		}
	}
	t.Logf("%d sessions expired", len(sessions))

	// None fired before its time.
	for _, ss := range byTarget {
		for _, s := range ss {
			if s.actor != "reminderActor" {
				continue
			}
			b := s.body.(map[string]any)
			rmu.Lock()
			seen, ok := remSeen[b["text"].(string)]
			rmu.Unlock()
			if at := time.UnixMilli(b["at"].(int64)); ok && seen.Before(at) {
				t.Errorf("reminder %s fired by %s, before its time %s", b["text"], seen.Format("15:04:05.000"), at.Format("15:04:05.000"))
			}
		}
	}
	for _, e := range readErrs {
		t.Errorf("stale read of counter %s", e)
	}
	// Nothing more fires: read again after the checks above.
	for _, k := range reminderKeys {
		var st struct{ Fired []string }
		if len(remWant[k]) > 0 && call("reminderActor", k, "getState", &st) == nil && len(st.Fired) != len(remWant[k]) {
			t.Errorf("reminderActor %s fired %d, then %d", k, len(remWant[k]), len(st.Fired))
		}
	}
	for _, k := range flowKeys {
		var st chaosFlowState
		if len(flowWant[k]) > 0 && call("chaosFlow", k, "getState", &st) == nil && len(st.Consumed) != len(flowWant[k]) {
			t.Errorf("chaosFlow %s consumed %d, then %d", k, len(flowWant[k]), len(st.Consumed))
		}
	}
	var nSends, nDup, nUnknownSend int
	for _, ss := range byTarget {
		for _, s := range ss {
			nSends++
			nUnknownSend += s.unknown
			if s.duplicate {
				nDup++
			}
		}
	}
	t.Logf("seed %d: %d kills; %d increments (%d acknowledged, %d unknown, %d not run); %d keyed sends (%d attempts of unknown outcome, %d answered duplicate); %d step effects ran before the committing attempt (%d within a second before or 5 s after a kill); %d reads",
		seed, len(kills), incCalls.Load(), totalAcked, totalUnknown, notRun.Load(), nSends, nUnknownSend, nDup, dups, dupsKilled, reads.Load())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
