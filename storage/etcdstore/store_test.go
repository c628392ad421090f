package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One etcd serves every subtest, each in its own namespace.
func TestConformance(t *testing.T) { conformance(t, etcdtest.StartClient(t)) }

// The same with the term probe alone, which tracks every write and runs a
// goroutine of its own.
func TestConformanceWithTermProbe(t *testing.T) {
	conformance(t, etcdtest.StartClient(t), etcdstore.WithTermProbe())
}

// The same as a node on external etcd runs it: the term probe, and commits
// sent to etcd's KV API directly.
func TestConformanceExternal(t *testing.T) {
	cli := etcdtest.StartClient(t)
	kv, opts, err := etcdstore.ClientKV(cli, 4<<20, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, cli, etcdstore.WithTermProbe(), etcdstore.WithKVClient(kv, opts...))
}

// A commit sent to etcd's KV API while etcd cannot be reached waits for it
// within its deadline, as clientv3's own calls do, rather than failing at
// once with an error whose outcome the committer must treat as unknown.
func TestClientKVWaitsForAnUnreachableEtcd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := externalStore(t, cli, "/t/")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("k", []byte("v"))}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("commit to an unreachable etcd: %v after %v, want the deadline's error after 500 ms", err, time.Since(start))
	}
	_, inProcess := startMember(t)
	if _, _, err := etcdstore.ClientKV(inProcess, 1, 1); err == nil {
		t.Fatal("ClientKV accepted an in-process client, which has no connection")
	}
}

// externalStore returns a store over cli's KV API, as a node on external
// etcd runs it, closed when the test ends.
func externalStore(t *testing.T, cli *clientv3.Client, prefix string) *etcdstore.Store {
	t.Helper()
	kv, opts, err := etcdstore.ClientKV(cli, 4<<20, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdstore.New(cli, prefix, etcdstore.WithKVClient(kv, opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startMember starts a member in this process and returns it with its
// in-process client, both closed when the test ends (cleanups, not
// defers: parallel subtests run after their parent function returns).
func startMember(t *testing.T) (*etcdstore.Embedded, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := etcdstore.StartEmbedded(ctx, etcdstore.DefaultLocalEmbeddedConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cli := e.Client()
	t.Cleanup(func() { e.Close() })
	t.Cleanup(func() { cli.Close() }) // runs first
	return e, cli
}

// With an empty prefix, a prefix delete of "" deletes every key, as it did
// through clientv3's builder (etcd wants a key: "\x00" to the end).
func TestRawCommitDeletesEverythingWithAnEmptyPrefix(t *testing.T) {
	cli := etcdtest.StartClient(t)
	s := externalStore(t, cli, "")
	ctx := context.Background()
	if err := s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("a", []byte("1")), storage.Put("b/c", []byte("2"))}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("")}}); err != nil {
		t.Fatalf("delete everything: %v", err)
	}
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d keys left (%v), want none", resp.Count, err)
	}
}

// The same as a node with an embedded member runs it: in process.
func TestConformanceInProcess(t *testing.T) {
	e, cli := startMember(t)
	conformance(t, cli, etcdstore.WithLeaderChanges(e.LeaderChanges()), etcdstore.WithKVClient(e.KVClient()))
}

func conformance(t *testing.T, cli *clientv3.Client, opts ...etcdstore.Option) {
	var n atomic.Int64
	storagetest.Run(t, storagetest.Harness{
		NewStore: func(t *testing.T) storage.Store {
			s, err := etcdstore.New(cli, fmt.Sprintf("/t%d/", n.Add(1)), opts...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// Compaction is etcd-wide, not per namespace: the suite compacts
		// only from subtests that run alone.
		Compact: func(ctx context.Context, _ storage.Store, rev int64) error {
			_, err := cli.Compact(ctx, rev)
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil // compacted at rev or later already
			}
			return err
		},
	})
}

// etcd's own refusals map to storage.ErrTooLarge too, for a store that
// believes its limits are higher than the server's.
func TestServerLimits(t *testing.T) {
	cli := etcdtest.StartClient(t)
	// The store's own limits are set above the server's, so that the
	// server's refusals are what is tested.
	s, err := etcdstore.New(cli, etcdstore.DefaultPrefix, etcdstore.WithLimits(storage.Limits{MaxTxnOps: 4 * etcdstore.EmbeddedMaxTxnOps, MaxTxnBytes: 8 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var many storage.Txn
	for i := range etcdstore.EmbeddedMaxTxnOps + 1 {
		many.Ops = append(many.Ops, storage.Put(fmt.Sprintf("k%d", i), nil))
	}
	for name, txn := range map[string]storage.Txn{
		"1025 ops (etcd: too many operations)": many,
		"1.6 MiB (etcd: request is too large)": {Ops: []storage.Op{storage.Put("big", make([]byte, 1600<<10))}},
		"2.1 MiB (client: ResourceExhausted)":  {Ops: []storage.Op{storage.Put("big", make([]byte, 2100<<10))}},
	} {
		if err := s.Commit(ctx, txn); !errors.Is(err, storage.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
	}
	if n, err := s.Count(ctx, ""); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want nothing written", n, err)
	}
}

func TestEmbeddedConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{}); err == nil {
		t.Fatal("StartEmbedded without Dir succeeded")
	}
	c := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	c.InitialClusterState = "maybe"
	if _, err := etcdstore.StartEmbedded(ctx, c); err == nil {
		t.Fatal("StartEmbedded with a bad InitialClusterState succeeded")
	}
}

// KeepAlive notices a lease revoked by someone else at its next renewal,
// and a node cut off from etcd learns that its lease is lost once the last
// validUntil passes, not before (its claims are still safe until then) and
// not much later (another node may claim them soon after).
func TestKeepAliveLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := etcdstore.StartEmbedded(ctx, etcdstore.DefaultLocalEmbeddedConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var closeOnce sync.Once
	closeEtcd := func() { closeOnce.Do(func() { e.Close() }) }
	t.Cleanup(closeEtcd)
	cli := etcdtest.NewClient(t, e.Endpoints())
	s, err := etcdstore.New(cli, etcdstore.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}

	lease, err := s.GrantLease(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := make(chan error, 1)
	go func() { elsewhere <- s.KeepAlive(ctx, lease, nil) }()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-elsewhere:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive of a lease revoked elsewhere = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("KeepAlive did not notice a lease revoked elsewhere")
	}

	lease, err = s.GrantLease(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		last time.Time
	)
	renewed := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.KeepAlive(ctx, lease, func(validUntil time.Time) {
			mu.Lock()
			last = validUntil
			mu.Unlock()
			select {
			case renewed <- struct{}{}:
			default:
			}
		})
	}()
	select {
	case <-renewed:
	case <-time.After(20 * time.Second):
		t.Fatal("no renewal")
	}
	// Close waits for open client streams to drain; it refuses new
	// requests at once.
	go closeEtcd()
	select {
	case err := <-done:
		at := time.Now()
		mu.Lock()
		validUntil := last
		mu.Unlock()
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive with etcd gone = %v, want ErrLeaseNotFound", err)
		}
		if at.Before(validUntil) {
			t.Fatalf("KeepAlive gave up %v before the lease could expire", validUntil.Sub(at))
		}
		// Generous for a loaded machine; the point is that it does not
		// wait for etcd to come back.
		if late := at.Sub(validUntil); late > 2*time.Second {
			t.Fatalf("KeepAlive gave up %v after the lease could expire", late)
		}
		t.Logf("KeepAlive gave up %v after validUntil: %v", at.Sub(validUntil), err)
	case <-time.After(20 * time.Second):
		t.Fatal("KeepAlive did not give up with etcd gone")
	}
}

// A write that fills etcd's database fails with "database space exceeded",
// which etcd's apply answers after writing the txn that crossed the quota:
// it is in doubt, never a definite failure (which tells the committer and
// the runtime that nothing was written, so that a client may retry a
// write that applied).
func TestAWriteThatFillsTheDatabaseIsInDoubt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	cfg.QuotaBackendBytes = 8 << 20
	e, err := etcdstore.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli := e.Client()
	defer cli.Close()
	st, err := etcdstore.New(cli, "/rivet/", etcdstore.WithLimits(etcdstore.EmbeddedLimits()), etcdstore.WithKVClient(e.KVClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	val := make([]byte, 64<<10)
	var (
		mu               sync.Mutex
		definite, doubts []string
		wg               sync.WaitGroup
	)
	for w := range 32 {
		wg.Go(func() {
			for i := range 1000 { // 64 MiB in all: far past the quota
				k := fmt.Sprintf("k/%02d/%04d", w, i)
				err := st.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(k, val)}})
				if err == nil {
					continue
				}
				mu.Lock()
				if storage.OutcomeUnknown(err) {
					doubts = append(doubts, k)
				} else {
					definite = append(definite, k+": "+err.Error())
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if len(definite)+len(doubts) == 0 {
		t.Fatal("no write failed: the quota was never reached")
	}
	for _, d := range definite {
		t.Errorf("a write failed definitely (nothing written, the client may retry it): %s", d)
	}
	written := 0
	for _, k := range doubts {
		if _, err := st.Get(ctx, k); err == nil {
			written++
		}
	}
	t.Logf("%d writes in doubt, %d of them written", len(doubts), written)
}

// A member that waits for peers that never come (the first of a new
// 3-member cluster) gives up when StartEmbedded's ctx ends: a node stopped
// with SIGTERM while it starts must stop.
func TestStartEmbeddedGivesUpWhileWaitingForPeers(t *testing.T) {
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", port())
	cfg := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	cfg.Name = "n1"
	cfg.PeerURL = peer
	cfg.InitialCluster = fmt.Sprintf("n1=%s,n2=http://127.0.0.1:%d,n3=http://127.0.0.1:%d", peer, port(), port())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		e, err := etcdstore.StartEmbedded(ctx, cfg)
		if e != nil {
			e.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a member without its peers started")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("StartEmbedded did not return 29 s after its ctx ended")
	}
}

// gatedLease holds the answer of a renewal, once armed, until released:
// the renewal etcd answered reaches KeepAlive late.
type gatedLease struct {
	clientv3.Lease
	armed   atomic.Bool
	held    chan struct{} // closed when a renewal is held
	release chan struct{}
}

func (g *gatedLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	resp, err := g.Lease.KeepAliveOnce(ctx, id)
	if g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.release
	}
	return resp, err
}

// A lease this store revokes ends its KeepAlive at once, even one whose
// renewal was answered before the revocation and heard of after it: the
// renewal does not bring the lease back to life, nor tell the caller that
// it holds for another TTL.
func TestKeepAliveEndsAtRevokeDuringARenewal(t *testing.T) {
	s, g := gatedStore(t, etcdtest.StartClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := s.GrantLease(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keepAliveEndsAtRevoke(t, ctx, s, g, lease)
}

// gatedStore is a store under "/ka/" over cli, whose lease renewals g can
// hold; closed when t ends.
func gatedStore(t *testing.T, cli *clientv3.Client) (*etcdstore.Store, *gatedLease) {
	t.Helper()
	g := &gatedLease{Lease: cli.Lease, held: make(chan struct{}), release: make(chan struct{})}
	cli.Lease = g
	s, err := etcdstore.New(cli, "/ka/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, g
}

// keepAliveEndsAtRevoke runs s.KeepAlive of lease, has s revoke it while
// g holds the first renewal's answer, then lets the answer go, and checks
// that KeepAlive ended with ErrLeaseNotFound at once, having reported no
// renewal.
func keepAliveEndsAtRevoke(t *testing.T, ctx context.Context, s *etcdstore.Store, g *gatedLease, lease storage.LeaseID) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var renewals atomic.Int32
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.KeepAlive(ctx, lease, func(time.Time) { renewals.Add(1) }) }()
	select {
	case <-g.held:
	case <-ctx.Done():
		t.Fatal("no renewal")
	}
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive of a revoked lease = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("KeepAlive went on after the store revoked its lease (until its next renewal, a third of the TTL away)")
	}
	if n := renewals.Load(); n != 0 {
		t.Fatalf("KeepAlive reported %d renewals of a lease revoked before it heard of them", n)
	}
}

// An embedded member bounds its key history by space, not only by time:
// under a sustained load, minutes of history outgrew etcd's space quota,
// after which etcd refuses every write. With its database over budget,
// the history is compacted within a few checks, long before the
// time-based compaction (minutes) runs.
func TestEmbeddedMemberBoundsItsHistoryBySpace(t *testing.T) {
	defer etcdstore.SetMinHistory(0)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	cfg.HistoryBudget = 1 // always over: every check compacts
	e, err := etcdstore.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cli := e.Client()
	t.Cleanup(func() { cli.Close() })

	resp, err := cli.Put(ctx, "k", "v0")
	if err != nil {
		t.Fatal(err)
	}
	r0 := resp.Header.Revision
	for i := range 100 {
		if _, err := cli.Put(ctx, "k", fmt.Sprint("v", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := cli.Get(ctx, "k", clientv3.WithRev(r0))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("a read at revision %d, 100 writes back, still served: the history was not compacted over budget", r0)
		case <-tick.C:
		}
	}
	// What it keeps is the latest value.
	got, err := cli.Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v100" {
		t.Fatalf("k after compaction = %v, %v; want v100", got, err)
	}
}
