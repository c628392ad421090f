package client

import (
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// PartitionOf is the partition of an actor with a one-component key.
func PartitionOf(name, key string, n uint32) uint32 {
	return placement.Partition(name, storage.EncodeKey([]string{key}), n)
}
