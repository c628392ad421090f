package server

import (
	"testing"

	"google.golang.org/grpc/keepalive"
)

// SetServerKeepalive makes the ServerOptions built until the test ends
// ping callers with kp. Not for parallel tests.
func SetServerKeepalive(t *testing.T, kp keepalive.ServerParameters) {
	old := serverKeepalive
	serverKeepalive = kp
	t.Cleanup(func() { serverKeepalive = old })
}
