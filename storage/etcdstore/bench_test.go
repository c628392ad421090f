package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// BenchmarkCommitter commits single-put fenced txns (256 B values) from N
// concurrent callers, through the group Committer and directly with one
// store Commit per txn. 256 callers show the Committer's ceiling, where
// batches fill up to the 128-op limit.
func BenchmarkCommitter(b *testing.B) {
	cli := etcdtest.StartClient(b)
	var ns atomic.Int64
	for _, mode := range []string{"committer", "direct"} {
		for _, callers := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode, callers), func(b *testing.B) {
				benchCommit(b, cli, fmt.Sprintf("/bench%d/", ns.Add(1)), mode == "committer", callers)
			})
		}
	}
}

func benchCommit(b *testing.B, cli *clientv3.Client, prefix string, grouped bool, callers int) {
	ctx := context.Background()
	s, err := etcdstore.New(cli, prefix)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lease, err := s.GrantLease(ctx, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer s.RevokeLease(ctx, lease)
	var ps []uint32
	for p := range uint32(64) {
		ps = append(ps, p)
	}
	claims, err := s.Claim(ctx, "bench", lease, ps)
	if err != nil || len(claims) != len(ps) {
		b.Fatalf("Claim: %d, %v", len(claims), err)
	}

	commit := func(txn storage.Txn) error { return s.Commit(ctx, txn) }
	var c *storage.Committer
	if grouped {
		c = storage.NewCommitter(s, storage.DefaultCommitterConfig())
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- c.Run(rctx) }()
		defer func() { cancel(); <-done }()
		commit = func(txn storage.Txn) error { return c.Commit(ctx, txn) }
	}

	value := make([]byte, 256)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range callers {
		cl := claims[g%len(claims)]
		fence := storage.Fence{Partition: cl.Partition, Token: cl.Token}
		base := storage.PartitionPrefix(cl.Partition) + fmt.Sprintf("g%d/", g)
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				key := base + fmt.Sprint(i%1000)
				if err := commit(storage.Txn{Fence: fence, Ops: []storage.Op{storage.Put(key, value)}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "txns/s")
	if c != nil {
		st := c.Stats()
		b.ReportMetric(float64(st.BatchedTxns)/float64(max(st.Batches, 1)), "txns/batch")
	}
	s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("")}})
}

// BenchmarkEtcdBatchedPut is etcd's own reference rate: raw txns of 64
// puts from 64 goroutines. One op is one txn.
func BenchmarkEtcdBatchedPut(b *testing.B) {
	cli := etcdtest.StartClient(b)
	var n atomic.Int64
	b.ResetTimer()
	start := time.Now()
	keys, err := etcdstore.BatchedPuts(context.Background(), cli, func() bool { return n.Add(1) <= int64(b.N) })
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(keys)/time.Since(start).Seconds(), "keys/s")
}

func TestMeasureBatchedPutRate(t *testing.T) {
	cli := etcdtest.StartClient(t)
	rate, err := etcdstore.MeasureBatchedPutRate(context.Background(), cli, 300*time.Millisecond)
	if err != nil || rate <= 0 {
		t.Fatalf("rate %v, %v", rate, err)
	}
	t.Logf("etcd batched put rate: %.0f keys/s", rate)
	if n, err := cli.Get(context.Background(), "/rivet-bench/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		t.Fatalf("keys left behind: %v, %v", n, err)
	}
}

// BenchmarkEtcdPutByValueSize is the reference load (64 writers, txns of
// 64 puts) with values of other sizes: what a key costs etcd beside what
// its bytes do, which says whether a write path gains more from fewer keys
// or from fewer bytes (docs/benchmarks.md, issue 3).
func BenchmarkEtcdPutByValueSize(b *testing.B) {
	cli := etcdtest.StartClient(b)
	for _, size := range []int{32, 128, 256, 512, 2048} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			value := string(make([]byte, size))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				txns, keys atomic.Int64
				wg         sync.WaitGroup
				failed     atomic.Pointer[error]
			)
			b.ResetTimer()
			start := time.Now()
			for w := range 64 {
				ops := make([]clientv3.Op, 64)
				for i := range ops {
					ops[i] = clientv3.OpPut(fmt.Sprintf("/by-size/%d/%02d/%02d", size, w, i), value)
				}
				wg.Go(func() {
					for ctx.Err() == nil && txns.Add(1) <= int64(b.N) {
						if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
							failed.CompareAndSwap(nil, &err)
							cancel()
							return
						}
						keys.Add(int64(len(ops)))
					}
				})
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(keys.Load())/secs, "keys/s")
			b.ReportMetric(float64(keys.Load())*float64(size)/secs/1e6, "value-MB/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
