// Package storage is the durable store of a rivet node, seen through the few
// operations the runtime needs: reads, fenced atomic transactions, leases and
// partition ownership claims.
//
// Two implementations pass one conformance suite (storage/storagetest): the
// etcd store (storage/etcdstore), which production uses, and the in-memory
// twin (NewMemory), which unit tests of pure packages use. Of the storage
// layer, only etcdstore imports etcd (package node also makes the etcd
// client of an external etcd, which it hands to etcdstore).
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
//
// # Watching
//
// ListRev reads keys with the revision they were read at, and Watch from
// that revision + 1 streams every later change once, in order. The store
// keeps a bounded history (etcd compacts it), so a watcher that falls too
// far behind gets ErrCompacted and must read again. Mirror does this for a
// small prefix (the partition table under OwnersPrefix, the node records
// under NodesPrefix), so that a node routes by an in-memory copy that
// trails etcd by a watch's latency.
//
// # Leases
//
// KeepAlive reports, after each renewal, a time before which the store
// cannot expire the lease (the renewal's send time plus the TTL), and
// reports the lease lost once that time passes without a renewal. A node
// cut off from etcd that stops serving by then has stopped before its
// claims can vanish and another node can take its partitions.
package storage
