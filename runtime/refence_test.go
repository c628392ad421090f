package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// A write whose outcome is unknown (etcd took it, its caller gave up) may
// still apply later. The host claims the partition again before the actor
// writes again, so the late write either came first, or fails its fence:
// it never overwrites a newer write. Here it comes after: the actor, at 1,
// is told its +5 has an unknown outcome, then is reloaded and takes +1
// (count 2); the +5 applied afterwards must be refused, and the count
// stay 2. Without the new claim it would land and the count read 6.
func TestWriteInDoubtNeverLandsOnANewerWrite(t *testing.T) {
	e := newEnvWith(t, counterReg(t), nil, true)
	if n := callInt(t, e.host, "counter", "doubt", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	p := placement.Partition("counter", storage.EncodeKey([]string{"doubt"}), testPartitions)
	oldToken, ok := e.own.Token(p)
	if !ok {
		t.Fatal("the partition is not owned")
	}

	e.store.stashCommitSub.Store(storage.EncodeKey([]string{"doubt"}))
	if _, err := call(t, e.host, "counter", "doubt", "increment", false, 5); !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("the increment whose write is in doubt: %v, want ErrTimeout (outcome unknown)", err)
	}
	e.store.stashMu.Lock()
	late := append([]storage.Txn(nil), e.store.stashed...)
	e.store.stashMu.Unlock()
	if len(late) == 0 {
		t.Fatal("no write was held back")
	}

	// Meanwhile calls get UNAVAILABLE, which clients retry.
	var n int
	waitFor(t, "the actor to take writes again", 10*time.Second, func() bool {
		raw, err := call(t, e.host, "counter", "doubt", "increment", false, 1)
		if errors.Is(err, rivet.ErrUnavailable) {
			return false
		}
		n = mustInt(t, raw, err)
		return true
	})
	if n != 2 {
		t.Fatalf("count after the retry = %d, want 2 (the doubtful +5 had not applied)", n)
	}
	if tok, ok := e.own.Token(p); !ok || tok == oldToken {
		t.Fatalf("partition %d token = %d (owned %v), want a new claim (was %d)", p, tok, ok, oldToken)
	}
	if got := e.host.Stats().Refences; got != 1 {
		t.Fatalf("Refences = %d, want 1", got)
	}

	// The held-back write reaches etcd now.
	if err := e.store.Store.Commit(context.Background(), late...); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("the late write: %v, want ErrFenced", err)
	}
	if n := callInt(t, e.host, "counter", "doubt", "getCount", false); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
}
