// Package servertest runs the gRPC services of package server in a test,
// on a real gRPC server on loopback, over Fake: an in-memory Backend whose
// answers a test can script. The client and rivetctl tests use it to
// exercise the whole wire path (validation, status codes, error details,
// retries) without a node, etcd or the runtime.
package servertest
