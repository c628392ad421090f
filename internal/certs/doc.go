// Package certs makes and loads the certificates that secure a node's gRPC
// port: Generate writes a private CA and the node and client certificates
// it signs (what `rivetctl certs` does, and what tests use), and
// ServerConfig and ClientConfig turn PEM files into the tls.Config of a
// node's server and of whatever dials a node (clients, rivetctl, peers).
//
// Only the standard library is used: no openssl is needed to run a cluster
// with mTLS.
package certs
