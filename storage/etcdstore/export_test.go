package etcdstore

import "time"

// BatchedPuts exposes the reference load to the benchmarks.
var BatchedPuts = batchedPuts

// SetMinHistory sets the history the compactor always keeps, for a test.
func SetMinHistory(d time.Duration) (restore func()) {
	old := minHistory
	minHistory = d
	return func() { minHistory = old }
}
