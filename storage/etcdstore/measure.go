package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shape of etcd's reference write load: 64 writers, 64 puts of 256 B
// per txn (the best case measured in toolchain.md, section 2).
const (
	refWorkers = 64
	refPerTxn  = 64
	refValue   = 256
)

// MeasureBatchedPutRate measures etcd's own write rate, the reference the
// project's write path is compared with: 64 goroutines, each committing
// raw etcd txns of 64 puts of 256-byte values, for dur. It returns the keys
// written per second. Its keys live under a fresh prefix, deleted at the
// end, so it can run against a store in use.
func MeasureBatchedPutRate(ctx context.Context, cli *clientv3.Client, dur time.Duration) (float64, error) {
	deadline := time.Now().Add(dur)
	start := time.Now()
	keys, err := batchedPuts(ctx, cli, func() bool { return time.Now().Before(deadline) })
	if err != nil {
		return 0, err
	}
	return float64(keys) / time.Since(start).Seconds(), nil
}

// batchedPuts runs the reference load until next returns false and
// returns how many keys it wrote.
func batchedPuts(ctx context.Context, cli *clientv3.Client, next func() bool) (int64, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "/rivet-bench/" + hex.EncodeToString(rnd[:]) + "/"
	value := string(make([]byte, refValue))

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		keys    atomic.Int64
		errOnce sync.Once
		firstEr error
		wg      sync.WaitGroup
	)
	for w := range refWorkers {
		ops := make([]clientv3.Op, refPerTxn)
		for i := range ops {
			ops[i] = clientv3.OpPut(fmt.Sprintf("%s%02d/%02d", prefix, w, i), value)
		}
		wg.Go(func() {
			for wctx.Err() == nil && next() {
				if _, err := cli.Txn(wctx).Then(ops...).Commit(); err != nil {
					errOnce.Do(func() { firstEr = err; cancel() })
					return
				}
				keys.Add(refPerTxn)
			}
		})
	}
	wg.Wait()
	if firstEr == nil {
		firstEr = ctx.Err()
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer dcancel()
	if _, err := cli.Delete(dctx, prefix, clientv3.WithPrefix()); err != nil && firstEr == nil {
		firstEr = err
	}
	if firstEr != nil {
		return 0, fmt.Errorf("etcdstore: batched puts: %w", firstEr)
	}
	return keys.Load(), nil
}
