// Package rpcerr is the single table between rivet's error kinds (the
// sentinels of package rivet) and gRPC status codes, in both directions.
//
// The server turns an error into a status with an ActorError detail; the Go
// client turns that status back into a *rivet.Error with the same kind, so
// that errors.Is(err, rivet.ErrNotFound) holds on both sides of the wire.
// Both sides, and any node-to-node transport, use this one package so that
// the two directions cannot drift apart.
package rpcerr
