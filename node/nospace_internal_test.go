package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/metricstest"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose etcd runs out of space (its NOSPACE alarm: etcd refuses
// every write that puts) keeps its lease and its partitions and serves
// reads; writes fail at once with UNAVAILABLE naming etcd's space. Only
// the first write etcd answered so is in doubt (the answer can follow a
// write that applied) and re-fences its partition, which etcd will not
// let the node claim back until space is freed: every later write is
// refused unsent, so no other partition goes. Before, every write went to
// etcd and into doubt, re-fenced its partition and lost it, until the
// node served nothing, reads included ("partition 5 ... is not owned").
// Once an operator frees space and disarms the alarm, the node writes
// again, without a restart, and nothing was lost or applied twice.
func TestANodeWhoseEtcdIsOutOfSpaceRefusesWritesAndRecovers(t *testing.T) {
	t.Parallel()
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallQuotaConfig(t)
	cfg.Partitions = parts
	cfg.HTTPAddr = "127.0.0.1:0"
	core, logs := observer.New(zap.WarnLevel)
	cfg.Logger = zap.New(core)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)
	// Retries cut to 1 s (5 s by default), to keep the test short.
	c, err := client.New(n.GRPCAddr(), client.WithRetry(50*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := func(i int) string { return fmt.Sprint("k", i) }
	const keys = 8
	for i := range keys {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("counter", key(i)), "increment", 1); err != nil {
			t.Fatal(err)
		}
	}

	// Other data fills etcd up, past its quota.
	fillEtcd(t, ctx, n)
	alarms, err := n.etcd.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 1 {
		t.Fatalf("alarms %v, %v: want NOSPACE", alarms, err)
	}

	warned := logs.Len()
	namedSpace := 0
	for i := range keys {
		t0 := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := rivet.Call[int](cctx, c.GetOrCreate("counter", key(i)), "increment", 1)
		ccancel()
		took := time.Since(t0)
		if !errors.Is(err, rivet.ErrUnavailable) || took > 5*time.Second {
			t.Errorf("increment %s while etcd is out of space: %v (code %v) after %v, want UNAVAILABLE within the client's retries", key(i), err, client.Code(err), took)
		}
		var re *rivet.Error
		if err != nil && strings.Contains(err.Error(), "database space exceeded") && errors.As(err, &re) && re.Group == "storage" && re.Code == "no_space" {
			// The reason tells an operator's problem from a failover's
			// moment without reading the text (a storage trial).
			namedSpace++
		}
	}
	// The first write can go in doubt (etcd was full before this node
	// knew) and cost its partition a re-fence; no other may.
	if namedSpace < keys-1 {
		t.Errorf("%d of %d writes failed naming etcd's space, with reason storage.no_space", namedSpace, keys)
	}
	// /metrics says what the clients were told, in reason: code is the
	// kind's, actor.unavailable, as a failover's.
	series, _, err := metricstest.Scrape("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := series[`rivet_calls_total{action="increment",actor="counter",code="actor.unavailable",reason="storage.no_space"}`]; got < keys-1 {
		t.Errorf("rivet_calls_total{reason=\"storage.no_space\"} = %v, want at least %d", got, keys-1)
	}
	if r := n.host.Stats().Refences; r > 1 {
		t.Errorf("%d partitions re-fenced while etcd was out of space, want at most 1", r)
	}
	if got := n.own.Owned(); got < parts-1 {
		t.Errorf("the node owns %d of %d partitions while etcd is out of space", got, parts)
	}
	if _, losses := n.own.LeaseStats(); losses != 0 {
		t.Errorf("the node lost its lease %d times", losses)
	}
	// Each write, and each of the client's retries, was refused: a
	// warning each flooded the log at the rate of requests. The balancer
	// warns of its failed claims once a pass, about once a second.
	perMessage := map[string]int{}
	for _, e := range logs.All()[warned:] {
		perMessage[e.Message]++
	}
	for msg, k := range perMessage {
		if k > 2 && msg != "claiming partitions failed" {
			t.Errorf("%d warnings %q while etcd was out of space (%d write calls), want at most 2", k, msg, keys)
		}
	}
	reads := 0
	for i := range keys {
		if v, err := rivet.Call[int](ctx, c.Get("counter", key(i)), "getCount"); err == nil && v == 1 {
			reads++
		}
	}
	if reads < keys-1 {
		t.Errorf("%d of %d reads answered while etcd is out of space", reads, keys)
	}

	// What an operator does: delete, compact, defragment, disarm.
	freeEtcdSpace(t, ctx, n.embedded.Endpoints())
	for i := range keys {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		v, err := rivet.Call[int](cctx, c.GetOrCreate("counter", key(i)), "increment", 1)
		ccancel()
		if err != nil || v != 2 {
			t.Errorf("increment %s once space is freed: %d, %v; want 2 (one before, none while full)", key(i), v, err)
		}
	}
	awaitCond(t, ctx, "the node to own every partition again", func() bool { return n.own.Owned() == parts })
}

// smallQuotaConfig is a local node's configuration, quiet, whose embedded
// etcd has a quota of 8 MiB: fillEtcd runs it out of space in a moment.
func smallQuotaConfig(t *testing.T) Config {
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 8
	cfg.EtcdQuota = 8 << 20
	cfg.Logger = zap.NewNop()
	return cfg
}

// fillEtcd puts junk (under /junk/) through n's etcd client until etcd
// refuses a put as out of space, its NOSPACE alarm raised: the node's own
// writes did not fill it, other data did.
func fillEtcd(t *testing.T, ctx context.Context, n *Node) {
	t.Helper()
	junk := strings.Repeat("x", 256<<10)
	for i := 0; i < 200; i++ {
		_, err := n.etcd.Put(ctx, fmt.Sprint("/junk/", i), junk)
		if err != nil && strings.Contains(err.Error(), "database space exceeded") {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("etcd took 50 MiB over its quota")
}

// freeEtcdSpace does what an operator does once etcd is out of space,
// through a client of its members at endpoints: deletes fillEtcd's junk,
// compacts, defragments each member, and disarms every alarm.
func freeEtcdSpace(t *testing.T, ctx context.Context, endpoints []string) {
	t.Helper()
	op := etcdtest.NewClient(t, endpoints)
	del, err := op.Delete(ctx, "/junk/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for _, ep := range endpoints {
		if _, err := op.Defragment(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	alarms, err := op.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alarms.Alarms {
		if _, err := op.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			t.Fatal(err)
		}
	}
}
