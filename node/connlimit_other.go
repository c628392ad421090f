//go:build !unix

package node

// connLimits returns the bounds on the connections the gRPC and the HTTP
// ports hold at once (see the unix version).
func connLimits() (grpcConns, httpConns int) { return defaultGRPCConns, defaultHTTPConns }
