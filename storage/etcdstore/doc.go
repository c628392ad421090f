// Package etcdstore is the production storage.Store: every key lives in
// etcd under a namespace prefix (default /rivet/), every storage.Commit is
// one etcd transaction whose compares carry the partition fences, and owner
// claims are keys on the node's etcd lease whose create revision is the
// fencing token.
//
// It also runs etcd itself inside the node (Embedded), for a single node or
// a cluster whose every node is an etcd member. It is the only package of
// the project that imports the etcd server; package node imports the etcd
// client too, to connect to an external etcd, and hands that client to
// this package (and etcd's fileutil, to lock its data directory).
package etcdstore
