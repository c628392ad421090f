package etcdstore

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// notifier mimics etcd's notify.Notifier: Receive returns the current
// channel; Notify closes it and replaces it.
type notifier struct {
	mu       sync.Mutex
	ch       chan struct{}
	receives int // how many times a channel was taken
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }
func (n *notifier) receive() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.receives++
	return n.ch
}

// taken waits until the store's leader follower has taken n channels of
// this notifier: it then waits on the latest.
func (n *notifier) taken(t *testing.T, count int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		got := n.receives
		n.mu.Unlock()
		if got >= count {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader follower took %d channels, want %d", got, count)
		}
		time.Sleep(time.Millisecond)
	}
}
func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

type fakeLeader struct{ changed, first *notifier }

func (f *fakeLeader) LeaderChangedNotify() <-chan struct{}     { return f.changed.receive() }
func (f *fakeLeader) FirstCommitInTermNotify() <-chan struct{} { return f.first.receive() }

type nopKV struct{ pb.KVClient }

// followingStore is a Store that follows lc's leader changes and writes
// nowhere; it closes with the test.
func followingStore(t *testing.T) (*Store, *fakeLeader) {
	t.Helper()
	lc := &fakeLeader{changed: newNotifier(), first: newNotifier()}
	s, err := New(&clientv3.Client{}, "/x/", WithKVClient(nopKV{}), WithLeaderChanges(lc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lc
}

// Two leader changes in quick succession (leader A dies, B is elected,
// B dies within ~3 s, C is elected). A write that began after the first
// change and is in flight at the second must be given up once C's first
// entry applies, as the first change's writes were.
func TestASecondLeaderChangeWhileTheFirstSettlesIsNotMissed(t *testing.T) {
	s, lc := followingStore(t)
	lc.changed.taken(t, 1) // followLeader waits for change 1

	before, endBefore := s.begin(context.Background())
	defer endBefore(nil)
	lc.changed.notify() // change 1: leader B
	lc.changed.taken(t, 2)
	// A write begins in B's term, once followLeader counted change 1.
	mid, endMid := s.begin(context.Background())
	defer endMid(nil)
	lc.first.notify() // B's first entry applies; followLeader sleeps leaderMargin
	time.Sleep(leaderMargin / 2)
	lc.changed.notify() // change 2 (leader C), during the margin
	select {
	case <-before.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the write from before change 1 was not given up")
	}
	time.Sleep(50 * time.Millisecond)
	lc.first.notify() // C's first entry applies
	select {
	case <-mid.Done():
		t.Logf("the write in flight at change 2 was given up: %v", context.Cause(mid))
	case <-time.After(2 * time.Second):
		t.Fatal("the write in flight at change 2 was never given up: change 2 was missed (it waits out etcd's request timeout)")
	}
}

// A term whose first entry applies here late (a member catching up) is
// still waited for, and the next change waits for its own term's first
// entry: the channel taken for it is not the one the late entry closed.
func TestALateFirstCommitDoesNotCutTheNextChangeShort(t *testing.T) {
	s, lc := followingStore(t)
	lc.changed.taken(t, 1)
	before, endBefore := s.begin(context.Background())
	defer endBefore(nil)
	lc.changed.notify() // change 1: leader B
	lc.changed.taken(t, 2)
	select {
	case <-before.Done():
		t.Fatalf("a write was given up before B's first entry applied: %v", context.Cause(before))
	case <-time.After(500 * time.Millisecond): // B's first entry is late
	}
	lc.first.notify()
	select {
	case <-before.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the write from before change 1 was not given up once B's first entry applied")
	}
	lc.first.taken(t, 2) // the follower took the next term's channel

	w, endW := s.begin(context.Background())
	defer endW(nil)
	lc.changed.notify() // change 2 (leader C); C has committed nothing
	select {
	case <-w.Done():
		t.Fatalf("a write was given up after change 2 although C's first entry never applied: %v", context.Cause(w))
	case <-time.After(time.Second):
	}
	lc.first.notify()
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the write in flight at change 2 was not given up once C's first entry applied")
	}
}
