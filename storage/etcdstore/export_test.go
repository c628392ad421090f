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

// TrackedLeases is how many leases the store keeps state for.
func (s *Store) TrackedLeases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}
