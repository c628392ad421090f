// Package placement maps actors to partitions and partitions to nodes. It is
// pure: no I/O, no clock, no randomness, so every node computes the same
// answer from the same inputs, and tests can check it against brute force.
package placement

import "hash/fnv"

// DefaultPartitions is the partition count of a new cluster. It is fixed
// when the cluster is created (stored in etcd) and never changes, because
// every stored key of an actor lives under its partition.
const DefaultPartitions = 1024

// Partition returns the partition of the actor (name, encKey) among n
// partitions. encKey is the actor key as storage.EncodeKey encodes it. The
// hash is FNV-1a 64, stable across versions and languages: changing it would
// orphan every stored actor.
func Partition(name, encKey string, n uint32) uint32 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(encKey))
	return uint32(h.Sum64() % uint64(n))
}
