// Package server is a node's gRPC front door: it implements the ActorService
// and AdminService of proto/rivet/v1 on top of a Backend (the runtime's
// Host).
//
// It is the edge where untrusted input meets the cluster, so it checks what
// is cheap to check before any work is routed: names, keys, that payloads are
// JSON (and args a JSON array), and payload sizes against Limits. It is also
// the one place where the server side turns errors into gRPC status codes,
// each status carrying an ActorError detail from which the client rebuilds
// the rivet error (see internal/rpcerr for the table).
//
// Wiring, in outline as package node does it (which also installs its
// token check, forwarding and a call counter):
//
//	srv := server.New(host, server.WithLogger(log))
//	gs := grpc.NewServer(append(server.ServerOptions(server.DefaultLimits()),
//		grpc.ChainUnaryInterceptor(server.UnaryInterceptor(log)))...)
//	srv.Register(gs)
//
// A node adds AuthServerOptions (a tap handle that refuses a call without
// the bearer token from its headers, before its request is read, and the
// same check as interceptors) before the forwarding interceptor; they
// guard everything but the gRPC health service's Check and List. Without
// a token it adds them too: the tap handle also drops a call whose
// request does not arrive in time (requestReadTimeout).
//
// Between nodes, ForwardingInterceptor sends a request for an actor
// another node owns over a PeerConn: a long-lived PeerService stream on
// which each message carries every call queued for it (outbox), served
// on the owner by PeerServer through the same ActorService handlers.
package server
