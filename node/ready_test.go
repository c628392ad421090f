package node_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose lease comes back after a loss says it is ready (gRPC health
// and /readyz) only once it has claimed what the ring gives it, as at
// start, not as soon as it has a lease. A is cut off from etcd and loses
// its lease; B takes every partition, then stops. When A's lease comes
// back, A claims again the partitions it held (half of them), but the ring
// now gives it all of them: it is ready once its balancer has claimed the
// rest. rivet_partitions_claimed_total counts the partitions claimed
// again with the lease as well as the balancer's claims (it counted only
// the balancer's).
func TestANodeBackFromALeaseLossIsReadyOnlyOnceItHoldsItsPartitions(t *testing.T) {
	t.Parallel()
	const parts = 16
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, endpoints[0][len("http://"):])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(name string, etcd, join []string) *node.Node {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.NodeID = name
		cfg.EtcdEndpoints = etcd
		cfg.EtcdPrefix = "/ready-test/"
		cfg.Partitions = parts
		cfg.LeaseTTL = 2 * time.Second
		cfg.Join = join
		// Longer than any settling here takes: A must turn ready through
		// its claims, not through the timeout after which it serves anyway.
		cfg.SettleTimeout = 90 * time.Second
		cfg.Logger = zap.NewNop()
		return startNode(t, ctx, cfg, reg)
	}
	b := start("b", endpoints, nil)
	a := start("a", []string{"http://" + proxy.addr()}, []string{b.GossipAddr()})
	waitUntil(t, "both nodes own partitions", 30*time.Second, func() bool {
		return a.Ownership().Owned() > 0 && b.Ownership().Owned() > 0 && a.Ownership().Owned()+b.Ownership().Owned() == parts
	})
	ca, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	serving := func() bool {
		ok, err := ca.Healthy(ctx)
		return err == nil && ok
	}
	readyz := func() int {
		code, _ := get(t, "http://"+a.HTTPAddr()+"/readyz")
		return code
	}

	// What A says the moment its lease is back: this callback runs after
	// the node's own ones. The status is read before the claims, so that
	// SERVING with fewer claims is A's doing, not a claim made between
	// the two reads.
	type sample struct {
		serving bool
		owned   int
	}
	var mu sync.Mutex
	var atEstablished []sample
	a.Ownership().OnEstablished(func() {
		s := sample{serving: serving()}
		s.owned = a.Ownership().Owned()
		mu.Lock()
		atEstablished = append(atEstablished, s)
		mu.Unlock()
	})

	// What A claimed before it lost its lease, and its moves since: each
	// claim counts, those of the lease that comes back too.
	waitUntil(t, "both balancers settled", 30*time.Second, func() bool {
		return a.BalancerSettledForTest() && b.BalancerSettledForTest() && a.Ownership().Owned()+b.Ownership().Owned() == parts
	})
	before, _ := scrape(t, a.HTTPAddr())
	lost := before["rivet_partitions_claimed_total"] - before["rivet_partitions_handed_off_total"]
	if owned := float64(a.Ownership().Owned()); lost != owned || lost == 0 {
		t.Fatalf("before the cut, A claimed %v partitions less those handed off, owning %v", lost, owned)
	}

	proxy.setDown(true)
	waitUntil(t, "A to lose its lease and say so", 30*time.Second, func() bool {
		return a.Ownership().Owned() == 0 && !serving() && readyz() == http.StatusServiceUnavailable
	})
	waitUntil(t, "B to own every partition", 30*time.Second, func() bool { return b.Ownership().Owned() == parts })
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := b.Stop(sctx); err != nil {
		t.Fatalf("stop B: %v", err)
	}
	scancel()

	// From now until A is ready, A must never say SERVING while it holds
	// fewer than all the partitions (status read first, as above).
	stop := make(chan struct{})
	var pollWG sync.WaitGroup
	var early []sample
	pollWG.Add(1)
	go func() {
		defer pollWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := sample{serving: serving()}
			s.owned = a.Ownership().Owned()
			if s.serving && s.owned < parts {
				early = append(early, s)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	proxy.setDown(false)
	waitUntil(t, "A serving again", 60*time.Second, serving)
	close(stop)
	pollWG.Wait()

	if n := a.Ownership().Owned(); n != parts {
		t.Errorf("A says SERVING owning %d partitions, want %d", n, parts)
	}
	if code := readyz(); code != http.StatusOK {
		t.Errorf("/readyz once A serves again = %d, want 200", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(atEstablished) == 0 {
		t.Fatal("A's lease never came back through a re-establishment")
	}
	for _, s := range atEstablished {
		t.Logf("when A's lease came back: serving=%v, owning %d of %d partitions", s.serving, s.owned, parts)
		if s.serving && s.owned < parts {
			t.Errorf("A said SERVING when its lease came back, owning %d of %d partitions", s.owned, parts)
		}
	}
	// Every partition A owns was claimed once it was back, the ones it
	// lost with its lease (claimed again with the new one) included.
	after, _ := scrape(t, a.HTTPAddr())
	claimed := after["rivet_partitions_claimed_total"] - before["rivet_partitions_claimed_total"]
	handed := after["rivet_partitions_handed_off_total"] - before["rivet_partitions_handed_off_total"]
	if claimed-handed != float64(a.Ownership().Owned()) {
		t.Errorf("rivet_partitions_claimed_total rose by %v (handed off %v) over the lease's loss, A owning %d of %d partitions (%v lost with the lease)",
			claimed, handed, a.Ownership().Owned(), parts, lost)
	}
	if len(early) > 0 {
		t.Errorf("A said SERVING before it held its partitions, %d times; first owning %d of %d", len(early), early[0].owned, parts)
	}
}
