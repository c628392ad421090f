package node

// Bounds on connections where the open files limit is not known.
const (
	defaultGRPCConns = 4096
	defaultHTTPConns = 256
)

// connLimitsOf returns connLimits' bounds for a limit of nofile open files.
func connLimitsOf(nofile uint64) (grpcConns, httpConns int) {
	g := min(nofile/2, 65_536)
	h := min(nofile/8, 1024)
	return int(max(g, 16)), int(max(h, 4))
}
