package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose external etcd is down for a while serves again within
// seconds of etcd's return, however long it was down. Its etcd client
// reconnected with gRPC's default backoff (1 s, growing 1.6 times per
// failed attempt, up to 2 minutes): after 12 s down, its next attempt
// came up to 8 s after etcd was back, and after an outage of some minutes
// up to 2 minutes after, the node serving nothing meanwhile.
func TestANodeServesAgainSoonAfterItsEtcdComesBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proxy, cl := counterBehindEtcdProxy(t, ctx, "/reconnect-test/", nil)

	const down = 12 * time.Second
	proxy.setDown(true)
	wentDown := time.Now()
	waitUntil(t, "the node not ready without etcd", 10*time.Second, func() bool {
		hctx, c := context.WithTimeout(ctx, time.Second)
		defer c()
		ok, err := cl.Healthy(hctx)
		return err == nil && !ok
	})
	time.Sleep(time.Until(wentDown.Add(down)))
	// The client kept trying: at least one attempt a second or so at the
	// end. gRPC's default backoff made one at most in these 4 s.
	tries := proxy.triesSince(wentDown.Add(down - 4*time.Second))
	proxy.setDown(false)
	back := time.Now()
	waitUntil(t, "the node ready again after etcd came back", 30*time.Second, func() bool {
		hctx, c := context.WithTimeout(ctx, time.Second)
		defer c()
		ok, err := cl.Healthy(hctx)
		return err == nil && ok
	})
	took := time.Since(back)
	if _, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", "k"), "increment", 1); err != nil {
		t.Fatalf("increment once ready again: %v", err)
	}
	t.Logf("etcd down %v: %d connection attempts in its last 4 s; ready again %v after it came back", down, tries, took.Round(time.Millisecond))
	if tries < 3 {
		t.Errorf("the etcd client tried to connect %d times in the last 4 s of the outage, want one a second or so", tries)
	}
	if took > 3*time.Second {
		t.Errorf("ready again %v after etcd came back, want within 3 s", took)
	}
}

// A node whose external etcd hangs without closing its connections (a
// frozen process or host: its kernel still acknowledges every byte, and
// nothing answers) gives up the connection within seconds, so a call
// whose write went out to it hears that its outcome is unknown, about
// 13 s after (10 s without a byte, 3 s for a ping's answer), rather than
// waiting for its whole deadline (or the committer's 30 s); and the
// client moves on to another member of a cluster, rather than sending
// part of its requests into the hung connection until TCP gives up, in
// some minutes. The etcd client sent no keepalive pings.
func TestAWriteToAFrozenEtcdEndsWithinSeconds(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, endpoints[0][len("http://"):])
	cfg := clusterConfig(t, "a", []string{"http://" + proxy.addr()}, "/frozen-test/", 4, nil)
	n := startNode(t, ctx, cfg, reg)
	cl, err := client.New(n.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := cl.GetOrCreate("counter", "k")
	if _, err := rivet.Call[int](ctx, h, "increment", 1); err != nil {
		t.Fatal(err)
	}
	proxy.setCut(true, false) // held: nothing answers, nothing is closed
	frozen := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 25*time.Second)
	defer ccancel()
	_, err = rivet.Call[int](cctx, h, "increment", 1)
	took := time.Since(frozen)
	t.Logf("the call to a frozen etcd ended after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("an increment succeeded while etcd was frozen")
	}
	if cctx.Err() != nil || took > 18*time.Second {
		t.Errorf("the call ended after %v (%v), at its deadline: its write waited on a hung connection", took, err)
	}
	if !rivet.OutcomeUnknown(err) {
		t.Errorf("the call's error %v does not say its outcome is unknown", err)
	}
	proxy.setCut(false, false)
	waitUntil(t, "the node ready again once etcd thaws", 30*time.Second, func() bool {
		hctx, c := context.WithTimeout(ctx, time.Second)
		defer c()
		ok, err := cl.Healthy(hctx)
		return err == nil && ok
	})
	if _, err := rivet.Call[int](ctx, h, "increment", 1); err != nil {
		t.Fatalf("increment once ready again: %v", err)
	}
}

// A node whose external etcd is down says so once, and once when it is
// back, and etcd's client does not flood its log meanwhile: the client
// logged a warning for every request that failed ("retrying of unary
// invoker failed"), one for each call its callers made that needed etcd,
// however long the outage, and the node named etcd nowhere (its lease
// lost, its actors' commits failed).
func TestANodeSaysOnceThatItsEtcdIsUnreachableAndBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	core, logs := observer.New(zapcore.InfoLevel)
	proxy, cl := counterBehindEtcdProxy(t, ctx, "/unreachable-log-test/", zap.New(core))

	logs.TakeAll()
	proxy.setDown(true)
	// Callers keep calling meanwhile, as they would: each call that
	// reaches etcd fails there.
	const down = 6 * time.Second
	wentDown := time.Now()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := cl.GetOrCreate("counter", fmt.Sprint("k", i))
			for time.Since(wentDown) < down {
				cctx, c := context.WithTimeout(ctx, 300*time.Millisecond)
				_, _ = rivet.Call[int](cctx, h, "increment", 1)
				c()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	during := logs.TakeAll()
	etcdClient := map[string]int{}
	lines := 0
	for _, e := range during {
		if e.LoggerName == "etcd-client" {
			etcdClient[e.Message]++
			lines++
		}
	}
	t.Logf("%d log lines in a %v outage, %d of etcd's client: %v", len(during), down, lines, etcdClient)
	for msg, k := range etcdClient {
		if k > 1 {
			t.Errorf("etcd's client logged %q %d times in a %v outage; want once", msg, k, down)
		}
	}
	count := func(es []observer.LoggedEntry, msg string) int {
		k := 0
		for _, e := range es {
			if e.Message == msg {
				k++
			}
		}
		return k
	}
	if k := count(during, "etcd unreachable"); k != 1 {
		t.Errorf("the node said %d times that etcd was unreachable during the outage; want once", k)
	}

	proxy.setDown(false)
	waitUntil(t, "the node ready again after etcd came back", 30*time.Second, func() bool {
		hctx, c := context.WithTimeout(ctx, time.Second)
		defer c()
		ok, err := cl.Healthy(hctx)
		return err == nil && ok
	})
	waitUntil(t, "the node saying etcd is reachable again", 10*time.Second, func() bool {
		return logs.FilterMessage("etcd reachable again").Len() > 0
	})
	after := logs.TakeAll()
	if k := count(during, "etcd reachable again") + count(after, "etcd unreachable"); k != 0 {
		t.Errorf("the node said etcd was back during the outage, or unreachable after it, %d times", k)
	}
	if k := count(after, "etcd reachable again"); k != 1 {
		t.Errorf("the node said %d times that etcd was reachable again; want once", k)
	}
}

// counterBehindEtcdProxy starts a node (logging to log, if not nil) whose
// external etcd it reaches through a faultProxy, and a client of it with
// no retries that has made one counter call.
func counterBehindEtcdProxy(t *testing.T, ctx context.Context, prefix string, log *zap.Logger) (*faultProxy, *client.Client) {
	t.Helper()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, endpoints[0][len("http://"):])
	cfg := clusterConfig(t, "a", []string{"http://" + proxy.addr()}, prefix, 4, nil)
	cfg.LeaseTTL = time.Second
	if log != nil {
		cfg.Logger = log
	}
	n := startNode(t, ctx, cfg, reg)
	cl, err := client.New(n.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := rivet.Call[int](ctx, cl.GetOrCreate("counter", "k"), "increment", 1); err != nil {
		t.Fatal(err)
	}
	return proxy, cl
}
