package etcdstore

// BatchedPuts exposes the reference load to the benchmarks.
var BatchedPuts = batchedPuts
