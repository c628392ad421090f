package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

// SetServerKeepalive makes the ServerOptions built until the test ends
// ping callers with kp. Not for parallel tests.
func SetServerKeepalive(t *testing.T, kp keepalive.ServerParameters) {
	old := serverKeepalive
	serverKeepalive = kp
	t.Cleanup(func() { serverKeepalive = old })
}

// SetRequestReadTimeout makes the tap handles of AuthServerOptions built
// until the test ends drop a call whose request has not come within d.
// Not for parallel tests.
func SetRequestReadTimeout(t *testing.T, d time.Duration) {
	old := requestReadTimeout
	requestReadTimeout = d
	t.Cleanup(func() { requestReadTimeout = old })
}
