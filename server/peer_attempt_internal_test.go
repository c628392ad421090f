package server

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// A forward that finds the connection IDLE and starts a new attempt waits
// for that attempt, although the watcher, which wakes on the same change
// and may not have run yet, still holds an earlier attempt's CONNECTING
// from longer than a connect wait ago: the forward was failed at once,
// "still CONNECTING 10s after its attempt began", microseconds into it.
func TestAForwardStartingAnAttemptIsNotFailedByAnEarlierAttemptsRecord(t *testing.T) {
	// The dial hangs: the attempt stays CONNECTING until the forward's
	// own wait ends.
	hang := func(ctx context.Context, _ string) (net.Conn, error) { <-ctx.Done(); return nil, ctx.Err() }
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(hang))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := NewPeerConn(conn)
	// The watcher as it was left by the earlier attempt, not running (it
	// has not woken to the connection's IDLE yet).
	done := make(chan struct{})
	close(done)
	pc.watchStop, pc.watchDone = func() {}, done
	pc.attemptState, pc.attemptSince = connectivity.Connecting, time.Now().Add(-10*time.Second)
	if st := conn.GetState(); st != connectivity.Idle {
		t.Fatalf("new connection %v, want IDLE", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err = pc.ready(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("ready on a connection whose dial hangs: no error after %v", took)
	}
	// Its own attempt's whole wait, not one counted from the earlier's.
	if took < PeerConnectWait*9/10 {
		t.Fatalf("forward starting a new attempt failed after %v, before a connect wait (%v): %v", took, PeerConnectWait, err)
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
}
