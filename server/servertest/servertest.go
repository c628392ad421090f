package servertest

import (
	"net"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rivet-go/rivet/server"
)

// Config is how Start serves.
type Config struct {
	// Limits go to both the server and the transport (ServerOptions).
	Limits server.Limits
	// Logger receives the server's logs; nil discards them.
	Logger *zap.Logger
	// GRPCOptions are added after the defaults, e.g. an interceptor that
	// fakes transport failures.
	GRPCOptions []grpc.ServerOption
}

// Start serves backend on 127.0.0.1 and returns the address. The server
// stops when the test ends.
func Start(t testing.TB, backend server.Backend, cfg Config) string {
	t.Helper()
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: listen: %v", err)
	}
	opts := append(server.ServerOptions(cfg.Limits), grpc.ChainUnaryInterceptor(server.UnaryInterceptor(log)))
	opts = append(opts, cfg.GRPCOptions...)
	gs := grpc.NewServer(opts...)
	server.New(backend, server.WithLimits(cfg.Limits), server.WithLogger(log)).Register(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis) // returns when Stop closes the listener
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}
