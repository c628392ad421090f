//go:build unix

package node

import "syscall"

// connLimits returns the bounds on the connections the gRPC and the HTTP
// ports hold at once: half the file descriptors the process may open for
// gRPC (clients and peers), at most 65,536 (about 16 KiB of memory each,
// idle), and an eighth for HTTP (scrapers and probes), at most 1,024. The
// rest is left for etcd (its files and connections) and the node's own
// connections to peers. Go raises the soft limit to the hard one as it
// starts, so this reads the limit the process has.
func connLimits() (grpcConns, httpConns int) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return defaultGRPCConns, defaultHTTPConns
	}
	return connLimitsOf(rl.Cur)
}
