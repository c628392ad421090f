package etcdstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The term probe gives up a write that has waited past probeAfter once a
// linearizable read answers from a newer term than the write began in,
// and leaves alone one that began in the current term. A leader change
// is stood in for by making the store believe an older term.
func TestTermProbeGivesUpOnlyWritesFromBeforeANewerTerm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := StartEmbedded(ctx, DefaultLocalEmbeddedConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := New(cli, "/probe/", WithTermProbe())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The prober learns the term at its start.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.inflightMu.Lock()
		term := s.term
		s.inflightMu.Unlock()
		if term > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the prober never learned etcd's term")
		}
	}

	// A write from the current term, waiting long: left alone.
	current, endCurrent := s.begin(ctx)
	// Make the store believe the term before: the next probe answers
	// from a newer one, a change, and a write from before it is given up.
	s.inflightMu.Lock()
	s.term--
	s.inflightMu.Unlock()
	before, endBefore := s.begin(ctx)
	select {
	case <-before.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the write from before the newer term was not given up")
	}
	if err := endBefore(before.Err()); !errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("given-up write: %v, want ErrLeaderChanged", err)
	}
	// The current write began in the epoch of s.term-1 too (the store
	// did not know better), so it is given up as well: the documented
	// false give-up of a term learned late. A write that begins now, in
	// the epoch the probe established, is not.
	after, endAfter := s.begin(ctx)
	time.Sleep(probeAfter + 3*probeEvery + leaderMargin) // several probes' worth: nothing may happen
	if err := after.Err(); err != nil {
		t.Fatalf("a write from the current term was given up: %v", context.Cause(after))
	}
	if err := endAfter(nil); err != nil {
		t.Fatal(err)
	}
	if err := endCurrent(current.Err()); err != nil && !errors.Is(err, ErrLeaderChanged) {
		t.Fatal(err)
	}

	// A write etcd refused definitely keeps its answer even if it was
	// being given up at that moment.
	refused, endRefused := s.begin(ctx)
	s.inflightMu.Lock()
	for _, c := range s.inflight {
		c.cancel(ErrLeaderChanged)
	}
	s.inflightMu.Unlock()
	<-refused.Done()
	if err := endRefused(rpctypes.ErrTooManyRequests); errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("a refused write was reported as given up: %v", err)
	}
}
