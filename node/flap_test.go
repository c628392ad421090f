package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose connection to etcd flaps (cut for a few hundred ms to a few
// seconds, restored, again), under a load of counter increments and
// sleeping workflows sent to every node: no increment acknowledged is
// lost, no partition is served by two nodes at once, every reminder
// acknowledged fires exactly once, each lease loss is counted and reported
// once, and once the connection holds the node serves again.
func TestAFlappingConnectionToEtcdLosesNothingAndTheNodeServesAgain(t *testing.T) {
	t.Parallel()
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, endpoints[0][len("http://"):])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const parts = 16
	// A short TTL, so that most cuts cost the lease, and short spells
	// of connection between them, so that cuts come as the lease comes
	// back and the claims taken again load.
	const ttl = time.Second
	const cutMin, cutSpan = 300 * time.Millisecond, 2 * time.Second
	const upMin, upSpan = 50 * time.Millisecond, 400 * time.Millisecond
	start := func(name string, etcd []string, join []string) *node.Node {
		cfg := clusterConfig(t, name, etcd, "/flap-test/", parts, join)
		cfg.LeaseTTL = ttl
		return startNode(t, ctx, cfg, reg)
	}
	b := start("b", endpoints, nil)
	c := start("c", endpoints, []string{b.GossipAddr()})
	a := start("a", []string{"http://" + proxy.addr()}, []string{b.GossipAddr()})
	nodes := []*node.Node{a, b, c}
	waitUntil(t, "every node owns partitions", 30*time.Second, func() bool {
		sum := 0
		for _, n := range nodes {
			if n.Ownership().Owned() == 0 {
				return false
			}
			sum += n.Ownership().Owned()
		}
		return sum == parts
	})
	var lostCalls atomic.Int64
	a.Ownership().OnLost(func() { lostCalls.Add(1) })
	_, losses0 := a.Ownership().LeaseStats()

	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		cl, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup

	// Two nodes serving one partition at once, sampled.
	var doubles atomic.Int64
	var doubleMsg atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for p := uint32(0); p < parts; p++ {
				var owners []string
				for _, n := range nodes {
					if n.Ownership().Owns(p) {
						owners = append(owners, n.ID())
					}
				}
				if len(owners) > 1 {
					// Again, in the other order: not a sampling skew.
					var again []string
					for i := len(nodes) - 1; i >= 0; i-- {
						if nodes[i].Ownership().Owns(p) {
							again = append(again, nodes[i].ID())
						}
					}
					if len(again) > 1 {
						doubles.Add(1)
						doubleMsg.Store(fmt.Sprintf("partition %d served by %v at %v", p, owners, time.Now().Format("15:04:05.000")))
					}
				}
			}
		}
	}()

	// Counter increments: each worker its own key, one at a time.
	const workers = 6
	type counterLog struct {
		key      string
		acked    int // increments acknowledged
		attempts int
		last     int // last value acknowledged
		regress  []string
	}
	logs := make([]*counterLog, workers)
	for w := range workers {
		lg := &counterLog{key: fmt.Sprintf("flap%d", w)}
		logs[w] = lg
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cl := clients[(w+i)%len(clients)]
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				lg.attempts++
				n, err := rivet.Call[int](cctx, cl.GetOrCreate("counter", lg.key), "increment", 1)
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				lg.acked++
				if n <= lg.last {
					lg.regress = append(lg.regress, fmt.Sprintf("%d after %d", n, lg.last))
				}
				lg.last = n
			}
		}()
	}

	// Sleeping workflows: a reminder each, due in 0.5 to 3 s.
	var remMu sync.Mutex
	var reminders []string
	const remEvery = 10 * time.Millisecond
	remInfo := map[string]string{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(remEvery):
			}
			key := "rem" + strconv.Itoa(i)
			at := time.Now().Add(500*time.Millisecond + rand.N(2500*time.Millisecond))
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := clients[i%len(clients)].GetOrCreate("reminderActor", key).Send(cctx, "reminders", map[string]any{"text": key, "at": at.UnixMilli()})
			cancel()
			if err == nil {
				remMu.Lock()
				reminders = append(reminders, key)
				remInfo[key] = fmt.Sprintf("sent to %s, acked %s, due %s", nodes[i%len(nodes)].ID(), time.Now().Format("15:04:05.000"), at.Format("15:04:05.000"))
				remMu.Unlock()
			}
		}
	}()

	// Flap: cut a off etcd for 0.3 to 3.5 s, restore for 0.3 to 2 s.
	const flaps = 10
	t0 := time.Now()
	for i := range flaps {
		cut := cutMin + rand.N(cutSpan)
		up := upMin + rand.N(upSpan)
		reset := i%2 == 0
		proxy.setCut(true, reset)
		time.Sleep(cut)
		proxy.setCut(false, false)
		t.Logf("flap %d: cut %v (reset %v), up %v; a's losses so far %d", i, cut.Round(time.Millisecond), reset, up.Round(time.Millisecond), lostCalls.Load())
		time.Sleep(up)
	}
	flapped := time.Since(t0)
	healed := time.Now()
	waitUntil(t, "a SERVING again and owning partitions after the flapping", 30*time.Second, func() bool {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ok, err := clients[0].Healthy(hctx)
		return err == nil && ok && a.Ownership().Owned() > 0
	})
	servedAfter := time.Since(healed)
	// A little more load on the healed cluster.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if n := doubles.Load(); n > 0 {
		t.Errorf("%d samples of a partition served by two nodes; last: %v", n, doubleMsg.Load())
	}
	_, losses := a.Ownership().LeaseStats()
	if got := int64(losses - losses0); got != lostCalls.Load() {
		t.Errorf("a's lease-loss counter says %d losses, OnLost ran %d times", got, lostCalls.Load())
	}
	if lostCalls.Load() == 0 {
		t.Errorf("a never lost its lease in %d cuts", flaps)
	}
	waitUntil(t, "every partition owned once", 30*time.Second, func() bool {
		sum := 0
		for _, n := range nodes {
			sum += n.Ownership().Owned()
		}
		return sum == parts
	})

	acked, attempts := 0, 0
	for _, lg := range logs {
		acked += lg.acked
		attempts += lg.attempts
		if len(lg.regress) > 0 {
			t.Errorf("counter %s went back: %v", lg.key, lg.regress)
		}
		var n int
		var err error
		for try := 0; try < 50; try++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			n, err = rivet.Call[int](cctx, clients[1].Get("counter", lg.key), "getCount")
			cancel()
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("count of %s: %v", lg.key, err)
			continue
		}
		if n < lg.last || n < lg.acked || n > lg.attempts {
			t.Errorf("counter %s = %d: %d acknowledged (last %d), %d attempts", lg.key, n, lg.acked, lg.last, lg.attempts)
		}
	}

	remMu.Lock()
	pending := append([]string(nil), reminders...)
	remMu.Unlock()
	nrem := len(pending)
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var left []string
		for _, key := range pending {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			raw, err := clients[2].Get("reminderActor", key).Call(cctx, "getState")
			cancel()
			var st struct{ Fired []string }
			if err != nil || json.Unmarshal(raw, &st) != nil || len(st.Fired) == 0 {
				left = append(left, key)
				continue
			}
			if len(st.Fired) != 1 || st.Fired[0] != key {
				t.Errorf("reminder %s fired %v, want exactly [%s]", key, st.Fired, key)
			}
		}
		pending = left
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, key := range pending {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		in, err := clients[1].Actor("reminderActor", key).Inspect(cctx)
		h, herr := clients[1].Actor("reminderActor", key).History(cctx)
		cancel()
		t.Logf("reminder %s (%s) never fired: inspect %+v (%v); history %+v (%v)", key, remInfo[key], in, err, h, herr)
		for _, n := range nodes {
			t.Logf("%s owns partition %d: %v", n.ID(), in.Info.Partition, n.Ownership().Owns(in.Info.Partition))
		}
	}
	if len(pending) > 0 {
		t.Errorf("%d of %d reminders acknowledged never fired: %v", len(pending), nrem, pending[:min(len(pending), 10)])
	}
	t.Logf("flapped %v: a lost its lease %d times; served again %v after; %d/%d increments acknowledged; %d reminders", flapped.Round(time.Millisecond), lostCalls.Load(), servedAfter.Round(time.Millisecond), acked, attempts, nrem)
}
