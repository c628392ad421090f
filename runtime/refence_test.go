package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// A write whose outcome is unknown (etcd took it, its caller gave up) may
// still apply later. Until the partition is claimed again, no write on
// its old claim leaves the node, and the late write, if it comes after,
// fails its fence: it never overwrites a newer write.
//
// Here the actor, at 1, is told its +5 has an unknown outcome. Before the
// host re-fences (held back by the test), a new call loads the actor again
// from storage (count 1) and adds 1: that write must not be sent, and the
// caller is told UNAVAILABLE (not run), as clients retry. Then the
// re-fence runs, the retried +1 gives 2, and the held-back +5 applied now
// is refused: the count stays 2. Without the committer's refusal the
// store would see a write on the old claim after the doubt; without the
// re-fence the token would not change and the late +5 would land (6).
func TestWriteInDoubtNeverLandsOnANewerWrite(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	e := newEnvWith(t, counterReg(t), nil, true, hold)
	reFence := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(reFence) // a failure before it ends the held goroutine too
	if n := callInt(t, e.host, "counter", "doubt", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	p := placement.Partition("counter", storage.EncodeKey([]string{"doubt"}), testPartitions)
	oldToken, ok := e.own.Token(p)
	if !ok {
		t.Fatal("the partition is not owned")
	}

	e.store.stashCommitSub.Store(storage.EncodeKey([]string{"doubt"}))
	// The re-fence is held, so the caller cannot learn within its
	// deadline whether the write applied.
	short, cancel := context.WithTimeout(ctx(t), time.Second)
	_, err := e.host.Call(short, runtime.CallRequest{Ref: runtime.Ref{Name: "counter", Key: []string{"doubt"}}, Action: "increment", Args: json.RawMessage(`[5]`)})
	cancel()
	if !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("the increment whose write is in doubt: %v, want ErrTimeout (outcome unknown)", err)
	}
	// On a slow machine the deadline can pass before the write reached
	// the store: it is held back then, later.
	var late []storage.Txn
	waitFor(t, "the write held back", 20*time.Second, func() bool {
		e.store.stashMu.Lock()
		late = append([]storage.Txn(nil), e.store.stashed...)
		e.store.stashMu.Unlock()
		return len(late) > 0
	})
	if len(late) == 0 {
		t.Fatal("no write was held back")
	}

	// The actor is loaded again on the old claim; its write is refused.
	if _, err := call(t, e.host, "counter", "doubt", "increment", false, 1); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("an increment on the doubted claim: %v, want ErrUnavailable", err)
	}
	e.store.stashMu.Lock()
	for _, f := range e.store.sent {
		if f.Token == oldToken {
			t.Errorf("a write on the doubted claim (partition %d, token %d) reached the store", f.Partition, f.Token)
		}
	}
	e.store.stashMu.Unlock()

	reFence()
	if n := incrementWhenServed(t, e, "doubt"); n != 2 {
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
	e.restart() // read what storage holds, not memory
	if n := callInt(t, e.host, "counter", "doubt", "getCount", false); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
}

// incrementWhenServed adds 1 to counter key once the host takes writes on
// it again (UNAVAILABLE until then, as a client retries), and returns the
// count.
func incrementWhenServed(t *testing.T, e *env, key string) int {
	t.Helper()
	var n int
	waitFor(t, "the actor to take writes again", 15*time.Second, func() bool {
		raw, err := call(t, e.host, "counter", key, "increment", false, 1)
		if errors.Is(err, rivet.ErrUnavailable) {
			return false
		}
		n = mustInt(t, raw, err)
		return true
	})
	return n
}

// A claim made by a re-fence can go in doubt before that re-fence has
// ended (here while it loads the partition's wakeups): it is re-fenced in
// turn, not dropped, or the partition would refuse every write until its
// lease ended (found in review).
func TestClaimGoingInDoubtDuringItsRefenceIsRefencedToo(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	if n := callInt(t, e.host, "counter", "again", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	p := placement.Partition("counter", storage.EncodeKey([]string{"again"}), testPartitions)
	t1, _ := e.own.Token(p)

	// The re-fence's claim stops in the wakeups' List until listGate.
	e.store.listGate = make(chan struct{})
	openList := sync.OnceFunc(func() { close(e.store.listGate) })
	t.Cleanup(openList) // before the host stops, which waits for the re-fence
	e.store.listHoldPrefix.Store(storage.WakeupPartitionPrefix(p))
	e.store.stashCommitSub.Store(storage.EncodeKey([]string{"again"}))
	// Its outcome is learned once the claim is replaced: it did not apply
	// (it is held back), so the caller may retry.
	if _, err := call(t, e.host, "counter", "again", "increment", false, 5); !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "not written") {
		t.Fatalf("the first doubtful increment: %v, want ErrUnavailable, not written", err)
	}
	var t2 int64
	waitFor(t, "the new claim", 10*time.Second, func() bool {
		tok, ok := e.own.Token(p)
		t2 = tok
		return ok && tok != t1
	})
	// A write on the new claim goes in doubt too.
	e.store.stashCommitSub.Store(storage.EncodeKey([]string{"again"}))
	// Its re-fence waits behind the first, held: the caller's deadline
	// passes before the outcome is known.
	short, cancel := context.WithTimeout(ctx(t), time.Second)
	_, err := e.host.Call(short, runtime.CallRequest{Ref: runtime.Ref{Name: "counter", Key: []string{"again"}}, Action: "increment", Args: json.RawMessage(`[7]`)})
	cancel()
	if !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("the second doubtful increment: %v, want ErrTimeout", err)
	}
	e.store.listHoldPrefix.Store("")
	openList()

	if n := incrementWhenServed(t, e, "again"); n != 2 {
		t.Fatalf("count = %d, want 2 (neither doubtful write applied)", n)
	}
	if tok, _ := e.own.Token(p); tok == t1 || tok == t2 {
		t.Fatalf("token %d, want neither doubted claim's (%d, %d)", tok, t1, t2)
	}
	if got := e.host.Stats().Refences; got != 2 {
		t.Fatalf("Refences = %d, want 2", got)
	}
}

// A caller that gives up while its write is in flight does not put the
// partition in doubt: the commits of Create and Destroy run on the host's
// context, as every other write does, so a client's short deadline cannot
// re-fence a partition (found in review: 200 GetOrCreate calls with 0.2-4
// ms deadlines made 53 re-fences). A Destroy whose caller left still
// lands, whole.
func TestCallersLeavingDoNotPutTheirPartitionInDoubt(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	if n := callInt(t, e.host, "counter", "leaver", "increment", true, 3); n != 3 {
		t.Fatalf("count = %d, want 3", n)
	}
	e.store.delGate, e.store.delEntered = make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(e.store.delGate) })
	t.Cleanup(release) // before the host stops, which waits for the delete
	e.store.holdDelPrefix.Store(true)
	dctx, cancel := context.WithCancel(context.Background())
	destroyed := make(chan error, 1)
	go func() { destroyed <- e.host.Destroy(dctx, runtime.Ref{Name: "counter", Key: []string{"leaver"}}) }()
	<-e.store.delEntered // the delete is in flight
	cancel()
	release()
	if err := <-destroyed; err != nil {
		t.Fatalf("Destroy whose caller left: %v, want its delete's outcome (nil)", err)
	}
	if _, err := call(t, e.host, "counter", "leaver", "getCount", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("the destroyed actor: %v, want ErrNotFound", err)
	}

	for i := range 200 {
		cctx, cancel := context.WithTimeout(context.Background(), time.Duration(200+i*20)*time.Microsecond)
		_, _, _ = e.host.GetOrCreate(cctx, runtime.Ref{Name: "counter", Key: []string{fmt.Sprintf("hurried-%d", i)}}, nil)
		cancel()
	}
	if got := e.host.Stats().Refences; got != 0 {
		t.Fatalf("Refences = %d after callers left, want 0", got)
	}
}

// A re-fence whose claim commits with its reply lost, and whose first look
// at storage fails too, adopts the claim on its next try instead of
// leaving the partition owned on record and served by no one (found in
// review).
func TestRefenceAdoptsAClaimWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	if n := callInt(t, e.host, "counter", "orphan", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	p := placement.Partition("counter", storage.EncodeKey([]string{"orphan"}), testPartitions)
	t1, _ := e.own.Token(p)
	e.store.loseClaimReply.Store(true)
	e.store.failClaims.Store(1)
	e.store.stashCommitSub.Store(storage.EncodeKey([]string{"orphan"}))
	if _, err := call(t, e.host, "counter", "orphan", "increment", false, 5); !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "not written") {
		t.Fatalf("the doubtful increment: %v, want ErrUnavailable, not written", err)
	}
	if n := incrementWhenServed(t, e, "orphan"); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	if tok, ok := e.own.Token(p); !ok || tok == t1 {
		t.Fatalf("token %d (owned %v), want a new claim (was %d)", tok, ok, t1)
	}
	if e.store.loseClaimReply.Load() {
		t.Fatal("no claim lost its reply: the test tested nothing")
	}
}

// A claim on this node's lease that it does not hold (a claim given up as
// in doubt that applied late) is served by no one, and no other node
// claims a partition owned on record. The balancer adopts it even when the
// ring wants it elsewhere, and then hands it off (found in review: only
// those the ring gave this node were adopted).
func TestBalancerAdoptsAndHandsOffAnOrphanClaimTheRingWantsElsewhere(t *testing.T) {
	t.Parallel()
	adoptsOrphanClaim(t, false)
}

// The same with the owner records a node's balancer reads (OwnerRecord):
// the orphan claim's record names this node with a token newer than the
// claim it released, which is a claim to adopt, not the table lagging
// behind the release (the two tests of a stale table above check the
// other side of adoptable).
func TestBalancerAdoptsAnOrphanClaimByItsRecord(t *testing.T) {
	t.Parallel()
	adoptsOrphanClaim(t, true)
}

func adoptsOrphanClaim(t *testing.T, byRecord bool) {
	t.Helper()
	e := newEnvWith(t, counterReg(t), nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Release p, then claim it on the node's lease behind the Ownership's
	// back: owned on record, not held.
	p, _ := releaseOneForN2(ctx, t, e)
	if got, err := e.store.Claim(ctx, "n1", e.own.Lease(), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("orphan claim: %v, %v", got, err)
	}
	owners := func() []string {
		out := make([]string, testPartitions)
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		claims, err := e.store.Claims(cctx)
		if err != nil {
			t.Errorf("listing claims: %v", err)
			return out
		}
		for _, c := range claims {
			out[c.Partition] = c.Node
		}
		return out
	}
	cfg := runtime.BalancerConfig{Owners: owners, Resync: 50 * time.Millisecond}
	if byRecord {
		cfg.OwnerRecord = func(q uint32) (string, int64) {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			claims, err := e.store.Claims(cctx)
			if err != nil {
				t.Errorf("listing claims: %v", err)
				return "", 0
			}
			for _, c := range claims {
				if c.Partition == q {
					return c.Node, c.Token
				}
			}
			return "", 0
		}
	}
	defer runBalancer(ctx, e, cfg)()
	deadline := time.Now().Add(20 * time.Second)
	for owners()[p] != "" || e.own.Holds(p) {
		if time.Now().After(deadline) {
			t.Fatalf("partition %d still owned on record by %q (held %v): the orphan claim was never handed off", p, owners()[p], e.own.Holds(p))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An owner table that still names this node for a partition it has just
// released (the table lags behind the release) is not taken for a claim
// whose reply was lost: claiming it back would take the partition from the
// node it was handed to.
func TestBalancerDoesNotClaimBackAPartitionOnAStaleTable(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, tok := releaseOneForN2(ctx, t, e)
	// The table and the record as before the release.
	record := func(q uint32) (string, int64) {
		if q == p {
			return "n1", tok
		}
		return "", 0
	}
	balanceOnStaleTable(ctx, t, e, p, tok, record, "on a table that lagged behind its release")
}

// The same, when the release's delete reaches this node's copy of the
// table between the balancer's reads of it: the owners it plans by still
// name this node, and the record it then looks up is gone. That look must
// not take the partition for a claim whose reply was lost (before the
// fix, the token was looked up alone, and none, 0, read as "unknown"): a
// draining node claimed back a partition it had just handed off, served
// it (a call loaded an actor there) and handed it off again, so the
// actor's OnSleep ran twice (node TestOnSleepCallsItsOwnActorDuringADrain,
// Sleeps 2).
func TestBalancerDoesNotClaimBackAPartitionWhoseRecordWentBetweenItsReads(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, tok := releaseOneForN2(ctx, t, e)
	gone := func(q uint32) (string, int64) { return "", 0 } // the copy once it applied the delete
	balanceOnStaleTable(ctx, t, e, p, tok, gone, "the table named this node, and its record, looked up after, was gone")
}

// balanceOnStaleTable runs the balancer on an owners table that names
// this node for p, which it released with token tok, and on record for
// the owner records, and fails unless p stayed released, in memory and in
// storage. Claimed back, p is handed off again (the ring gives it to n2),
// and may be between the two when the balancer stops: the last released
// token tells.
func balanceOnStaleTable(ctx context.Context, t *testing.T, e *env, p uint32, tok int64, record func(uint32) (string, int64), why string) {
	t.Helper()
	var looks atomic.Int64
	table := func() []string {
		looks.Add(1)
		out := make([]string, testPartitions)
		out[p] = "n1" // as before the release
		return out
	}
	stop := runBalancer(ctx, e, runtime.BalancerConfig{Owners: table, OwnerRecord: record, Resync: 20 * time.Millisecond})
	waitFor(t, "the balancer to look several times", 20*time.Second, func() bool { return looks.Load() >= 10 })
	stop()
	if e.own.Holds(p) || e.own.ReleasedToken(p) != tok {
		t.Fatalf("partition %d, released with token %d, was claimed back (held %v, last released token %d): %s", p, tok, e.own.Holds(p), e.own.ReleasedToken(p), why)
	}
	claims, err := e.store.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Partition == p {
			t.Fatalf("partition %d claimed again in storage: %+v", p, c)
		}
	}
}

// A caller whose write went in doubt but had applied learns so once the
// claim is replaced: it gets its reply, not "outcome unknown", and the
// write is there, once.
func TestAWriteInDoubtThatAppliedIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	if n := callInt(t, e.host, "counter", "landed", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	p := placement.Partition("counter", storage.EncodeKey([]string{"landed"}), testPartitions)
	t1, _ := e.own.Token(p)
	e.store.applyThenFailSub.Store(storage.EncodeKey([]string{"landed"}))
	if n := callInt(t, e.host, "counter", "landed", "increment", false, 5); n != 6 {
		t.Fatalf("the increment whose reply was lost = %d, want 6", n)
	}
	if got := e.host.Stats().Resolved; got != 1 {
		t.Fatalf("Resolved = %d, want 1", got)
	}
	if tok, ok := e.own.Token(p); ok && tok == t1 {
		t.Fatal("the claim of a write in doubt was not replaced")
	}
	if n := incrementWhenServed(t, e, "landed"); n != 7 {
		t.Fatalf("count = %d, want 7 (the write in doubt applied once)", n)
	}
}

// twoNodes is the ring of the balancer tests: this node, n1, and an n2
// that exists only in it.
var twoNodes = []string{"n1", "n2"}

// releaseOneForN2 releases a partition of e's node that the two-node ring
// gives n2, and returns it with the token released.
func releaseOneForN2(ctx context.Context, t *testing.T, e *env) (uint32, int64) {
	t.Helper()
	p := uint32(0)
	for placement.Owner(p, twoNodes) != "n2" {
		p++
	}
	tok, ok := e.own.Token(p)
	if !ok || !e.own.BeginRelease(p) {
		t.Fatalf("partition %d not held at the start", p)
	}
	if err := e.own.FinishRelease(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p, tok
}

// runBalancer runs a balancer of e's node over the two-node ring with
// cfg's table, until the returned stop.
func runBalancer(ctx context.Context, e *env, cfg runtime.BalancerConfig) (stop func()) {
	cfg.Eligible = func() []string { return twoNodes }
	b := runtime.NewBalancer(cfg, e.host, e.own)
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	return func() {
		cancel()
		<-done
	}
}
