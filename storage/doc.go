// Package storage is the durable store of a rivet node, seen through the few
// operations the runtime needs: reads, fenced atomic transactions, leases and
// partition ownership claims.
//
// Two implementations pass one conformance suite (storage/storagetest): the
// etcd store (storage/etcdstore), which production uses, and the in-memory
// twin (NewMemory), which unit tests of pure packages use. Only etcdstore
// imports the etcd client.
//
// # Fencing
//
// Every write of an actor belongs to a partition. A node may write to a
// partition only while it holds that partition's owner claim; the claim's
// token (in etcd, the create revision of owners/<partition>) is compared in
// the same transaction as the write. A node that lost its claim (lease
// expired, or the claim was handed off) can never write again with the old
// token: its transaction fails with ErrFenced and changes nothing.
//
// # Group commit
//
// The Committer packs the transactions of many actors into one store
// transaction, within the store's limits (Limits), so that a node does not pay
// one fsync per write. A packed transaction that fails is split and each
// part retried alone, so that one lost partition or one failed condition does
// not fail the others.
package storage
