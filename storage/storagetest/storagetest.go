// Package storagetest is the conformance suite of storage.Store: the one
// set of tests that the etcd store and the in-memory twin both pass, so
// that tests run on the twin say something about production. It also runs
// the storage.Committer over the store under test.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage"
)

// Harness is what the suite needs of an implementation.
type Harness struct {
	// NewStore returns an empty store (a fresh namespace will do) for one
	// subtest; the suite closes it.
	NewStore func(t *testing.T) storage.Store
	// Compact discards the history of s before rev, as etcd's compaction
	// does, so that a Watch from an older revision fails with
	// ErrCompacted. Nil skips the subtests that need it. The suite calls
	// it only from subtests that do not run in parallel, so that it cannot
	// compact away the revisions another subtest is watching from.
	Compact func(ctx context.Context, s storage.Store, rev int64) error
}

// Run runs the suite. Some subtests run in parallel and some wait for real
// lease expiry (a few seconds).
func Run(t *testing.T, h Harness) {
	compact := func(s storage.Store) func(context.Context, int64) error {
		if h.Compact == nil {
			return nil
		}
		return func(ctx context.Context, rev int64) error { return h.Compact(ctx, s, rev) }
	}
	tests := []struct {
		name     string
		parallel bool
		fn       func(*testing.T, storage.Store)
	}{
		{"GetListCount", false, testGetListCount},
		{"ListOptions", false, testListOptions},
		{"Revisions", false, testRevisions},
		{"ListAtRevision", false, func(t *testing.T, s storage.Store) { testListAtRevision(t, s, compact(s)) }},
		{"Conds", false, testConds},
		{"CommitAtomic", false, testCommitAtomic},
		{"DeletePrefix", false, testDeletePrefix},
		{"TooLarge", false, testTooLarge},
		{"InvalidTxn", false, testInvalidTxn},
		{"PutIfAbsent", false, testPutIfAbsent},
		{"PutLeasedConds", false, testPutLeasedConds},
		{"LeaseRevoke", false, testLeaseRevoke},
		{"ClaimRelease", false, testClaimRelease},
		{"NoLease", false, testNoLease},
		{"StaleFence", false, testStaleFence},
		{"Closed", false, testClosed},
		{"KeepAliveHolds", true, testKeepAliveHolds},
		{"KeepAliveLost", true, testKeepAliveLost},
		{"LeaseExpires", true, testLeaseExpires},
		{"CommitterConcurrent", true, testCommitterConcurrent},
		{"CommitterFencedInBatch", false, testCommitterFencedInBatch},
		{"CommitterTooLarge", false, testCommitterTooLarge},
		{"WatchEvents", false, testWatchEvents},
		{"WatchLeaseExpiry", true, testWatchLeaseExpiry},
		{"WatchFollowsWrites", false, testWatchFollowsWrites},
		{"WatchCompacted", false, func(t *testing.T, s storage.Store) { testWatchCompacted(t, s, compact(s)) }},
		{"WatchCancel", false, testWatchCancel},
		{"WatchClosed", false, testWatchClosed},
		{"KeepAliveLostAfterRenewal", true, testKeepAliveLostAfterRenewal},
		{"MirrorConverges", false, testMirrorConverges},
		{"MirrorCompacted", false, func(t *testing.T, s storage.Store) { testMirrorCompacted(t, s, compact(s)) }},
		{"MirrorLeaseExpiry", true, testMirrorLeaseExpiry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.parallel {
				t.Parallel()
			}
			s := h.NewStore(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func commit(t *testing.T, s storage.Store, txns ...storage.Txn) {
	t.Helper()
	if err := s.Commit(testCtx(t), txns...); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func puts(kv ...string) storage.Txn {
	var t storage.Txn
	for i := 0; i < len(kv); i += 2 {
		t.Ops = append(t.Ops, storage.Put(kv[i], []byte(kv[i+1])))
	}
	return t
}

func mustGet(t *testing.T, s storage.Store, key string) storage.KV {
	t.Helper()
	kv, err := s.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return kv
}

func wantValue(t *testing.T, s storage.Store, key, want string) {
	t.Helper()
	if got := mustGet(t, s, key); string(got.Value) != want {
		t.Fatalf("Get(%q) = %q, want %q", key, got.Value, want)
	}
}

func wantAbsent(t *testing.T, s storage.Store, key string) {
	t.Helper()
	if kv, err := s.Get(testCtx(t), key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, kv.Value, err)
	}
}

func wantCount(t *testing.T, s storage.Store, prefix string, want int64) {
	t.Helper()
	n, err := s.Count(testCtx(t), prefix)
	if err != nil || n != want {
		t.Fatalf("Count(%q) = %d, %v; want %d", prefix, n, err, want)
	}
}

func keys(kvs []storage.KV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

func wantList(t *testing.T, s storage.Store, prefix string, opts storage.ListOptions, want ...string) []storage.KV {
	t.Helper()
	kvs, err := s.List(testCtx(t), prefix, opts)
	if err != nil {
		t.Fatalf("List(%q, %+v): %v", prefix, opts, err)
	}
	if got := keys(kvs); !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
		t.Fatalf("List(%q, %+v) = %q, want %q", prefix, opts, got, want)
	}
	return kvs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func claimOne(t *testing.T, s storage.Store, lease storage.LeaseID, p uint32) storage.Claim {
	t.Helper()
	cs, err := s.Claim(testCtx(t), "n1", lease, []uint32{p})
	if err != nil || len(cs) != 1 {
		t.Fatalf("Claim(%d) = %+v, %v; want one claim", p, cs, err)
	}
	return cs[0]
}

func grant(t *testing.T, s storage.Store, ttl time.Duration) storage.LeaseID {
	t.Helper()
	l, err := s.GrantLease(testCtx(t), ttl)
	if err != nil {
		t.Fatalf("GrantLease: %v", err)
	}
	return l
}

func testGetListCount(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	wantAbsent(t, s, "a")
	commit(t, s, puts("a", "1", "b/1", "2", "b/2", "3", "c", ""))
	wantValue(t, s, "a", "1")
	wantValue(t, s, "c", "")
	if kv := mustGet(t, s, "b/1"); kv.Key != "b/1" || kv.Lease != 0 {
		t.Fatalf("Get(b/1) = %+v", kv)
	}
	kvs := wantList(t, s, "b/", storage.ListOptions{}, "b/1", "b/2")
	if string(kvs[0].Value) != "2" || string(kvs[1].Value) != "3" {
		t.Fatalf("List values = %q, %q", kvs[0].Value, kvs[1].Value)
	}
	wantList(t, s, "", storage.ListOptions{}, "a", "b/1", "b/2", "c")
	wantList(t, s, "x", storage.ListOptions{})
	wantCount(t, s, "b/", 2)
	wantCount(t, s, "", 4)
	wantCount(t, s, "zz", 0)

	// Returned slices belong to the caller.
	kv := mustGet(t, s, "a")
	kv.Value[0] = 'X'
	wantValue(t, s, "a", "1")
	// Passed-in slices are not retained.
	v := []byte("v")
	if err := s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("m", v)}}); err != nil {
		t.Fatal(err)
	}
	v[0] = 'X'
	wantValue(t, s, "m", "v")
}

func testListOptions(t *testing.T, s storage.Store) {
	commit(t, s, puts("l/a", "1", "l/b", "2", "l/c", "3", "l/d", "4", "lx", "5", "k", "0"))
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "l/b"}, "l/c", "l/d")
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "l/bb"}, "l/c", "l/d")
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "a"}, "l/a", "l/b", "l/c", "l/d")
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "l/d"})
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "m"})
	wantList(t, s, "l/", storage.ListOptions{Limit: 2}, "l/a", "l/b")
	wantList(t, s, "l/", storage.ListOptions{StartAfter: "l/a", Limit: 2}, "l/b", "l/c")
	wantList(t, s, "l", storage.ListOptions{StartAfter: "l/d"}, "lx")
	kvs := wantList(t, s, "l/", storage.ListOptions{KeysOnly: true, Limit: 1}, "l/a")
	if kvs[0].Value != nil || kvs[0].CreateRevision == 0 {
		t.Fatalf("KeysOnly List = %+v, want no value and revisions", kvs[0])
	}
	// Paging through with StartAfter and Limit visits every key once.
	var all []string
	after := ""
	for {
		page := wantListAny(t, s, "", storage.ListOptions{StartAfter: after, Limit: 2})
		if len(page) == 0 {
			break
		}
		all = append(all, keys(page)...)
		after = page[len(page)-1].Key
	}
	if want := []string{"k", "l/a", "l/b", "l/c", "l/d", "lx"}; !slices.Equal(all, want) {
		t.Fatalf("paged keys = %q, want %q", all, want)
	}
}

func wantListAny(t *testing.T, s storage.Store, prefix string, opts storage.ListOptions) []storage.KV {
	t.Helper()
	kvs, err := s.List(testCtx(t), prefix, opts)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return kvs
}

func testRevisions(t *testing.T, s storage.Store) {
	commit(t, s, puts("r/a", "1"))
	a1 := mustGet(t, s, "r/a")
	if a1.CreateRevision == 0 || a1.CreateRevision != a1.ModRevision {
		t.Fatalf("new key revisions = %d/%d", a1.CreateRevision, a1.ModRevision)
	}
	commit(t, s, puts("r/a", "2"))
	a2 := mustGet(t, s, "r/a")
	if a2.CreateRevision != a1.CreateRevision || a2.ModRevision <= a1.ModRevision {
		t.Fatalf("rewritten key revisions = %d/%d after %d/%d", a2.CreateRevision, a2.ModRevision, a1.CreateRevision, a1.ModRevision)
	}
	// One commit is one revision, across its txns.
	commit(t, s, puts("r/b", "1"), puts("r/c", "1"))
	b, c := mustGet(t, s, "r/b"), mustGet(t, s, "r/c")
	if b.ModRevision != c.ModRevision || b.ModRevision <= a2.ModRevision {
		t.Fatalf("one commit made revisions %d and %d (after %d)", b.ModRevision, c.ModRevision, a2.ModRevision)
	}
	// A recreated key has a new create revision.
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("r/b")}})
	wantAbsent(t, s, "r/b")
	commit(t, s, puts("r/b", "2"))
	if b2 := mustGet(t, s, "r/b"); b2.CreateRevision <= b.CreateRevision {
		t.Fatalf("recreated key CreateRevision %d, was %d", b2.CreateRevision, b.CreateRevision)
	}
	// Deleting a missing key is not an error.
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("r/none")}})
}

func testConds(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	commit(t, s, puts("c/here", "1"))
	commit(t, s, storage.Txn{Conds: []storage.Cond{storage.Absent("c/none"), storage.Present("c/here")}, Ops: puts("c/a", "1").Ops})
	wantValue(t, s, "c/a", "1")
	for _, cond := range []storage.Cond{storage.Absent("c/here"), storage.Present("c/none")} {
		err := s.Commit(ctx, storage.Txn{Conds: []storage.Cond{cond}, Ops: puts("c/b", "1").Ops})
		if !errors.Is(err, storage.ErrConditionFailed) {
			t.Fatalf("Commit with failing %+v = %v, want ErrConditionFailed", cond, err)
		}
		wantAbsent(t, s, "c/b")
	}
	// A txn of conds alone checks them and writes nothing.
	if err := s.Commit(ctx, storage.Txn{Conds: []storage.Cond{storage.Present("c/none")}}); !errors.Is(err, storage.ErrConditionFailed) {
		t.Fatalf("conds-only Commit = %v, want ErrConditionFailed", err)
	}
	if err := s.Commit(ctx, storage.Txn{Conds: []storage.Cond{storage.Present("c/here")}}); err != nil {
		t.Fatalf("conds-only Commit = %v", err)
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatalf("empty Commit = %v", err)
	}

	// Unchanged holds while the key keeps the mod revision it was read
	// with; 0 stands for a key that does not exist.
	here := mustGet(t, s, "c/here")
	commit(t, s, storage.Txn{Conds: []storage.Cond{storage.Unchanged("c/here", here.ModRevision), storage.Unchanged("c/none", 0)}, Ops: puts("c/c", "1").Ops})
	wantValue(t, s, "c/c", "1")
	commit(t, s, puts("c/here", "2"))
	for _, cond := range []storage.Cond{storage.Unchanged("c/here", here.ModRevision), storage.Unchanged("c/here", 0), storage.Unchanged("c/none", here.ModRevision)} {
		err := s.Commit(ctx, storage.Txn{Conds: []storage.Cond{cond}, Ops: puts("c/b", "1").Ops})
		if !errors.Is(err, storage.ErrConditionFailed) {
			t.Fatalf("Commit with failing %+v = %v, want ErrConditionFailed", cond, err)
		}
		wantAbsent(t, s, "c/b")
	}
}

// PutLeased with conds writes only if they hold, checking them before the
// lease, and refuses what Commit refuses.
func testPutLeasedConds(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(ctx, lease)
	commit(t, s, puts("pl/other", "1"))
	other := mustGet(t, s, "pl/other")
	if err := s.PutLeased(ctx, "pl/me", []byte("1"), lease, storage.Unchanged("pl/other", other.ModRevision), storage.Present("pl/other"), storage.Absent("pl/none")); err != nil {
		t.Fatalf("PutLeased with holding conds = %v", err)
	}
	if kv := mustGet(t, s, "pl/me"); string(kv.Value) != "1" || kv.Lease != lease {
		t.Fatalf("PutLeased wrote %q on lease %d, want 1 on %d", kv.Value, kv.Lease, lease)
	}

	// Another writer changes the key the conds relied on: nothing written.
	commit(t, s, puts("pl/other", "2"))
	for _, cond := range []storage.Cond{storage.Unchanged("pl/other", other.ModRevision), storage.Absent("pl/other"), storage.Present("pl/none")} {
		if err := s.PutLeased(ctx, "pl/me", []byte("2"), lease, cond); !errors.Is(err, storage.ErrConditionFailed) {
			t.Fatalf("PutLeased with failing %+v = %v, want ErrConditionFailed", cond, err)
		}
	}
	wantValue(t, s, "pl/me", "1")
	// A key deleted since it was read has changed too.
	other = mustGet(t, s, "pl/other")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("pl/other")}})
	if err := s.PutLeased(ctx, "pl/me", []byte("2"), lease, storage.Unchanged("pl/other", other.ModRevision)); !errors.Is(err, storage.ErrConditionFailed) {
		t.Fatalf("PutLeased unchanged on a deleted key = %v, want ErrConditionFailed", err)
	}
	wantValue(t, s, "pl/me", "1")

	// Conds are checked before the lease: failing ones say so, holding
	// ones leave the lease's error.
	gone := grant(t, s, 30*time.Second)
	if err := s.RevokeLease(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLeased(ctx, "pl/gone", nil, gone, storage.Present("pl/none")); !errors.Is(err, storage.ErrConditionFailed) {
		t.Fatalf("PutLeased with a failing cond on a revoked lease = %v, want ErrConditionFailed", err)
	}
	if err := s.PutLeased(ctx, "pl/gone", nil, gone, storage.Absent("pl/none")); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("PutLeased with a holding cond on a revoked lease = %v, want ErrLeaseNotFound", err)
	}
	wantAbsent(t, s, "pl/gone")

	// Malformed or too many conds are refused whole.
	many := make([]storage.Cond, s.Limits().MaxTxnOps+1)
	for i := range many {
		many[i] = storage.Absent(fmt.Sprintf("pl/none%d", i))
	}
	if err := s.PutLeased(ctx, "pl/me", []byte("3"), lease, many...); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("PutLeased with %d conds = %v, want ErrTooLarge", len(many), err)
	}
	for _, cond := range []storage.Cond{{Kind: 99, Key: "pl/other"}, storage.Absent("")} {
		if err := s.PutLeased(ctx, "pl/me", []byte("3"), lease, cond); !errors.Is(err, storage.ErrInvalidTxn) {
			t.Fatalf("PutLeased with cond %+v = %v, want ErrInvalidTxn", cond, err)
		}
	}
	wantValue(t, s, "pl/me", "1")
}

func testCommitAtomic(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(ctx, lease)
	good := claimOne(t, s, lease, 1)
	stale := claimOne(t, s, lease, 2)
	if _, err := s.Release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	commit(t, s, puts("x/old", "1"))

	ok := storage.Txn{Fence: storage.Fence{Partition: 1, Token: good.Token}, Ops: []storage.Op{
		storage.Put("x/a", []byte("1")), storage.Delete("x/old"),
	}}
	failCond := storage.Txn{Conds: []storage.Cond{storage.Present("x/none")}, Ops: puts("x/b", "1").Ops}
	fenced := storage.Txn{Fence: storage.Fence{Partition: 2, Token: stale.Token}, Ops: puts("x/c", "1").Ops}

	check := func(err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("Commit = %v, want %v", err, want)
		}
		wantList(t, s, "x/", storage.ListOptions{}, "x/old")
	}
	check(s.Commit(ctx, ok, failCond), storage.ErrConditionFailed)
	check(s.Commit(ctx, failCond, ok), storage.ErrConditionFailed)
	check(s.Commit(ctx, ok, fenced), storage.ErrFenced)
	// ErrFenced wins over ErrConditionFailed.
	check(s.Commit(ctx, failCond, fenced, ok), storage.ErrFenced)
	check(s.Commit(ctx, storage.Txn{Fence: fenced.Fence, Conds: failCond.Conds}), storage.ErrFenced)

	// Identical fences in one commit are fine.
	ok2 := storage.Txn{Fence: ok.Fence, Ops: puts("x/d", "1").Ops}
	commit(t, s, ok, ok2)
	wantList(t, s, "x/", storage.ListOptions{}, "x/a", "x/d")
}

func testDeletePrefix(t *testing.T, s storage.Store) {
	commit(t, s, puts("d/1/a", "", "d/1/b", "", "d/10", "", "d/2/a", "", "e", ""))
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("d/1/"), storage.Put("d/3", nil)}})
	wantList(t, s, "d/", storage.ListOptions{}, "d/10", "d/2/a", "d/3")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("d/")}})
	wantList(t, s, "", storage.ListOptions{}, "e")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("nothing/")}})
}

func testTooLarge(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lim := s.Limits()
	if lim.MaxTxnOps != 128 || lim.MaxTxnBytes < 1<<20 || lim.MaxTxnBytes > 1536<<10 {
		t.Fatalf("Limits = %+v, want etcd's defaults (128 ops, under 1.5 MiB)", lim)
	}
	many := func(n int) storage.Txn {
		var txn storage.Txn
		for i := range n {
			txn.Ops = append(txn.Ops, storage.Put(fmt.Sprintf("t/%03d", i), []byte("v")))
		}
		return txn
	}
	if err := s.Commit(ctx, many(129)); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("129 ops: %v, want ErrTooLarge", err)
	}
	wantCount(t, s, "t/", 0)
	// Split over txns, the ops still count as one store transaction.
	a, b := many(129), storage.Txn{}
	a.Ops, b.Ops = a.Ops[:64], a.Ops[64:]
	if err := s.Commit(ctx, a, b); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("129 ops in 2 txns: %v, want ErrTooLarge", err)
	}
	wantCount(t, s, "t/", 0)
	var conds storage.Txn
	for i := range 129 {
		conds.Conds = append(conds.Conds, storage.Absent(fmt.Sprintf("t/c%03d", i)))
	}
	if err := s.Commit(ctx, conds); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("129 conds: %v, want ErrTooLarge", err)
	}
	commit(t, s, many(128))
	wantCount(t, s, "t/", 128)

	big := make([]byte, 1600<<10)
	if err := s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("t/big", big)}}); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("1.6 MiB value: %v, want ErrTooLarge", err)
	}
	wantAbsent(t, s, "t/big")
	// So for the single writes: etcd refuses them, and the twin must too.
	if _, _, err := s.PutIfAbsent(ctx, "t/big", big); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("PutIfAbsent of 1.6 MiB: %v, want ErrTooLarge", err)
	}
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(ctx, lease)
	if err := s.PutLeased(ctx, "t/big", big, lease); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("PutLeased of 1.6 MiB: %v, want ErrTooLarge", err)
	}
	wantAbsent(t, s, "t/big")
	// Within the limit, a large value goes through whole.
	large := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Put("t/large", large)}})
	if kv := mustGet(t, s, "t/large"); !bytes.Equal(kv.Value, large) {
		t.Fatalf("1 MiB value read back with %d bytes", len(kv.Value))
	}
}

func testInvalidTxn(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	for name, txns := range map[string][]storage.Txn{
		"put twice":            {puts("i/a", "1", "i/a", "2")},
		"put twice over txns":  {puts("i/a", "1"), puts("i/a", "2")},
		"put and delete":       {{Ops: []storage.Op{storage.Put("i/a", nil), storage.Delete("i/a")}}},
		"put under del prefix": {puts("i/b", "1"), {Ops: []storage.Op{storage.DeletePrefix("i/")}}},
		// An empty key would be the namespace's own key in etcd: a key
		// no List or Watch of the namespace shows.
		"put of empty key":    {puts("i/a", "1"), puts("", "1")},
		"delete of empty key": {puts("i/a", "1"), {Ops: []storage.Op{storage.Delete("")}}},
		"cond on empty key":   {{Conds: []storage.Cond{storage.Absent("")}, Ops: []storage.Op{storage.Put("i/a", nil)}}},
		"unknown op kind":     {puts("i/a", "1"), {Ops: []storage.Op{{Kind: 99, Key: "i/c"}}}},
		"unknown cond kind":   {{Conds: []storage.Cond{{Kind: 99, Key: "i/c"}}, Ops: []storage.Op{storage.Put("i/a", nil)}}},
	} {
		if err := s.Commit(ctx, txns...); !errors.Is(err, storage.ErrInvalidTxn) {
			t.Fatalf("%s: %v, want ErrInvalidTxn", name, err)
		}
	}
	wantCount(t, s, "i/", 0)
	// Overlapping deletes are allowed, as etcd allows them.
	commit(t, s, puts("i/a", "1", "i/b", "1"))
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("i/a"), storage.DeletePrefix("i/"), storage.Delete("i/b")}},
		storage.Txn{Ops: []storage.Op{storage.Delete("i/a")}})
	wantCount(t, s, "i/", 0)
}

func testPutIfAbsent(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	v, created, err := s.PutIfAbsent(ctx, "p/a", []byte("1"))
	if err != nil || !created || string(v) != "1" {
		t.Fatalf("PutIfAbsent new = %q, %v, %v", v, created, err)
	}
	v, created, err = s.PutIfAbsent(ctx, "p/a", []byte("2"))
	if err != nil || created || string(v) != "1" {
		t.Fatalf("PutIfAbsent existing = %q, %v, %v; want 1, false", v, created, err)
	}
	wantValue(t, s, "p/a", "1")
}

func testLeaseRevoke(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	l1, l2 := grant(t, s, 30*time.Second), grant(t, s, 30*time.Second)
	if l1 == 0 || l1 == l2 {
		t.Fatalf("leases %d, %d: want distinct and non-zero", l1, l2)
	}
	if err := s.PutLeased(ctx, storage.NodeKey("n1"), []byte("addr"), l1); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLeased(ctx, storage.NodeKey("n2"), []byte("addr"), l2); err != nil {
		t.Fatal(err)
	}
	if kv := mustGet(t, s, storage.NodeKey("n1")); kv.Lease != l1 {
		t.Fatalf("leased key Lease = %d, want %d", kv.Lease, l1)
	}
	cs, err := s.Claim(ctx, "n1", l1, []uint32{3, 4})
	if err != nil || len(cs) != 2 {
		t.Fatalf("Claim = %+v, %v", cs, err)
	}
	if err := s.RevokeLease(ctx, l1); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, storage.NodeKey("n1"))
	wantValue(t, s, storage.NodeKey("n2"), "addr")
	if cs, err := s.Claims(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("Claims after revoke = %+v, %v; want none", cs, err)
	}
	if err := s.RevokeLease(ctx, l1); err != nil {
		t.Fatalf("revoking a revoked lease: %v", err)
	}
	if err := s.PutLeased(ctx, "k", nil, l1); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("PutLeased on revoked lease = %v, want ErrLeaseNotFound", err)
	}
	if _, err := s.Claim(ctx, "n1", l1, []uint32{5}); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("Claim on revoked lease = %v, want ErrLeaseNotFound", err)
	}
	if err := s.KeepAlive(ctx, l1, nil); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("KeepAlive on revoked lease = %v, want ErrLeaseNotFound", err)
	}
	// A put without the lease detaches the key from it.
	commit(t, s, puts(storage.NodeKey("n2"), "plain"))
	if err := s.RevokeLease(ctx, l2); err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, storage.NodeKey("n2"), "plain")
}

func testClaimRelease(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	l1, l2 := grant(t, s, 30*time.Second), grant(t, s, 30*time.Second)
	defer s.RevokeLease(ctx, l1)
	defer s.RevokeLease(ctx, l2)
	cs, err := s.Claim(ctx, "n1", l1, []uint32{2, 0, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	var ps []uint32
	for _, c := range cs {
		ps = append(ps, c.Partition)
		if c.Node != "n1" || c.Lease != l1 || c.Token == 0 {
			t.Fatalf("claim %+v", c)
		}
		if kv := mustGet(t, s, storage.OwnerKey(c.Partition)); kv.CreateRevision != c.Token || string(kv.Value) != "n1" {
			t.Fatalf("owner key %+v for claim %+v", kv, c)
		}
	}
	if !slices.Equal(ps, []uint32{0, 1, 2}) {
		t.Fatalf("claimed %v, want [0 1 2]", ps)
	}
	// Owned partitions are skipped, by the owner too.
	cs2, err := s.Claim(ctx, "n2", l2, []uint32{1, 2, 3})
	if err != nil || len(cs2) != 1 || cs2[0].Partition != 3 || cs2[0].Node != "n2" {
		t.Fatalf("second Claim = %+v, %v; want partition 3 only", cs2, err)
	}
	if again, err := s.Claim(ctx, "n1", l1, []uint32{0}); err != nil || len(again) != 0 {
		t.Fatalf("reclaim by owner = %+v, %v; want none", again, err)
	}
	all, err := s.Claims(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("Claims = %+v, %v", all, err)
	}
	want := append(slices.Clone(cs), cs2...)
	for i, c := range all {
		if c != want[i] {
			t.Fatalf("Claims[%d] = %+v, want %+v", i, c, want[i])
		}
	}
	// Release with the token frees the partition, and says at which
	// revision; a stale token is a no-op (revision 0).
	rev, err := s.Release(ctx, cs[1])
	if err != nil {
		t.Fatal(err)
	}
	if kvs, err := s.List(ctx, storage.OwnerKey(1), storage.ListOptions{Revision: rev - 1}); err != nil || len(kvs) != 1 || kvs[0].CreateRevision != cs[1].Token {
		t.Fatalf("the claim just before its release's revision %d = %+v, %v; want it held", rev, kvs, err)
	}
	if kvs, err := s.List(ctx, storage.OwnerKey(1), storage.ListOptions{Revision: rev}); err != nil || len(kvs) != 0 {
		t.Fatalf("the claim at its release's revision %d = %+v, %v; want it gone", rev, kvs, err)
	}
	if rev, err := s.Release(ctx, cs[1]); err != nil || rev != 0 {
		t.Fatalf("second Release = %d, %v; want 0, nil", rev, err)
	}
	re, err := s.Claim(ctx, "n2", l2, []uint32{1})
	if err != nil || len(re) != 1 || re[0].Token <= cs[1].Token {
		t.Fatalf("claim after release = %+v, %v; want a newer token than %d", re, err, cs[1].Token)
	}
	if rev, err := s.Release(ctx, cs[1]); err != nil || rev != 0 {
		t.Fatalf("stale Release = %d, %v; want 0, nil", rev, err)
	}
	if kv := mustGet(t, s, storage.OwnerKey(1)); string(kv.Value) != "n2" {
		t.Fatalf("stale Release removed the new claim: owner %q", kv.Value)
	}
	// Claims in large numbers go through in several store transactions.
	var many []uint32
	for p := uint32(100); p < 400; p++ {
		many = append(many, p)
	}
	got, err := s.Claim(ctx, "n1", l1, append([]uint32{0, 1}, many...))
	if err != nil || len(got) != len(many) {
		t.Fatalf("Claim of %d partitions made %d, %v", len(many), len(got), err)
	}
	for i, c := range got {
		if c.Partition != many[i] {
			t.Fatalf("claim %d is partition %d, want %d", i, c.Partition, many[i])
		}
	}
}

// testNoLease: lease 0 is no lease. A claim or a node record on it would
// be a key that no lease expiry ever removes: a partition owned, or a node
// registered, for ever.
func testNoLease(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	if cs, err := s.Claim(ctx, "n1", 0, []uint32{5}); !errors.Is(err, storage.ErrLeaseNotFound) || len(cs) != 0 {
		t.Fatalf("Claim on lease 0 = %+v, %v; want ErrLeaseNotFound", cs, err)
	}
	wantAbsent(t, s, storage.OwnerKey(5))
	if err := s.PutLeased(ctx, "nl/a", []byte("1"), 0); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("PutLeased on lease 0 = %v, want ErrLeaseNotFound", err)
	}
	if err := s.PutLeased(ctx, "nl/a", []byte("1"), 0, storage.Absent("nl/b")); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("PutLeased on lease 0 with a holding cond = %v, want ErrLeaseNotFound", err)
	}
	// Conds are checked first, as for a lease that is gone.
	if err := s.PutLeased(ctx, "nl/a", []byte("1"), 0, storage.Present("nl/b")); !errors.Is(err, storage.ErrConditionFailed) {
		t.Fatalf("PutLeased on lease 0 with a failing cond = %v, want ErrConditionFailed", err)
	}
	wantAbsent(t, s, "nl/a")
}

func testStaleFence(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(ctx, lease)
	const p = 7
	key := storage.ActorPrefix(p, "counter", "k") + storage.StateSuffix
	old := claimOne(t, s, lease, p)
	write := func(c storage.Claim, v string) error {
		return s.Commit(ctx, storage.Txn{Fence: storage.Fence{Partition: p, Token: c.Token}, Ops: puts(key, v).Ops})
	}
	if err := write(old, "1"); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, key)
	if _, err := s.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := write(old, "released"); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("write after release = %v, want ErrFenced", err)
	}
	cur := claimOne(t, s, lease, p)
	if cur.Token == old.Token {
		t.Fatalf("reclaim kept token %d", cur.Token)
	}
	if err := write(old, "stale"); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("write with stale token = %v, want ErrFenced", err)
	}
	if after := mustGet(t, s, key); string(after.Value) != "1" || after.ModRevision != before.ModRevision {
		t.Fatalf("stale write changed the key: %q at %d, was %q at %d", after.Value, after.ModRevision, before.Value, before.ModRevision)
	}
	if err := write(cur, "2"); err != nil {
		t.Fatalf("write with current token = %v", err)
	}
	wantValue(t, s, key, "2")
	// A partition never claimed fences every token.
	if err := s.Commit(ctx, storage.Txn{Fence: storage.Fence{Partition: 99, Token: cur.Token}}); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("write to unowned partition = %v, want ErrFenced", err)
	}
}

func testClosed(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	done := make(chan error, 1)
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- s.KeepAlive(kctx, lease, nil) }()
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	if err := s.Commit(ctx, puts("a", "1")); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Commit after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// renewal is one call of KeepAlive's renewed callback.
type renewal struct {
	validUntil time.Time
	// at is when the callback ran: the renewal was sent before it.
	at time.Time
}

func testKeepAliveHolds(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	// Both stores keep exactly this TTL: etcd's minimum with its default
	// timing is 2 s, and the memory twin keeps whole seconds.
	const ttl = 2 * time.Second
	lease := grant(t, s, ttl)
	defer s.RevokeLease(context.WithoutCancel(ctx), lease)
	if err := s.PutLeased(ctx, "ka/held", []byte("1"), lease); err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var (
		mu       sync.Mutex
		renewals []renewal
	)
	start := time.Now()
	go func() {
		done <- s.KeepAlive(kctx, lease, func(validUntil time.Time) {
			mu.Lock()
			renewals = append(renewals, renewal{validUntil, time.Now()})
			mu.Unlock()
		})
	}()
	// Outlive the TTL twice over while renewing.
	for time.Since(start) < 2*ttl+time.Second {
		wantValue(t, s, "ka/held", "1")
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive after ctx done = %v, want nil", err)
	}
	wantValue(t, s, "ka/held", "1")

	// Each renewal was sent after the previous callback (or the call) and
	// before its own callback, and validUntil is in (sent, sent+ttl].
	mu.Lock()
	defer mu.Unlock()
	if len(renewals) < 3 {
		t.Fatalf("%d renewals in %v with a TTL of %v, want at least 3", len(renewals), 2*ttl+time.Second, ttl)
	}
	after := start
	for i, r := range renewals {
		if !r.validUntil.After(after) || r.validUntil.After(r.at.Add(ttl)) {
			t.Fatalf("renewal %d: validUntil %v is not in (%v, %v]: the renewal was sent in [%v, %v]",
				i, r.validUntil.Sub(start), after.Sub(start), r.at.Add(ttl).Sub(start), after.Sub(start), r.at.Sub(start))
		}
		after = r.at
	}
}

// A lease revoked while KeepAlive renews it is reported lost.
func testKeepAliveLostAfterRenewal(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 2*time.Second)
	renewed := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.KeepAlive(ctx, lease, func(validUntil time.Time) {
			select {
			case renewed <- validUntil:
			default:
			}
		})
	}()
	select {
	case <-renewed:
	case err := <-done:
		t.Fatalf("KeepAlive = %v before its first renewal", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no renewal")
	}
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive of a revoked lease = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("KeepAlive did not notice the revoked lease")
	}
}

func testKeepAliveLost(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 2*time.Second)
	if err := s.PutLeased(ctx, "ka/lost", nil, lease); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.KeepAlive(ctx, lease, nil) }()
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive of a revoked lease = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("KeepAlive did not notice the revoked lease")
	}
	wantAbsent(t, s, "ka/lost")

	// A store with a test hook to expire leases (the memory twin) shows
	// node loss without waiting for the TTL.
	x, ok := s.(interface{ ExpireLease(storage.LeaseID) })
	if !ok {
		return
	}
	lease = grant(t, s, time.Minute)
	claimOne(t, s, lease, 1)
	go func() { done <- s.KeepAlive(ctx, lease, nil) }()
	x.ExpireLease(lease)
	if err := <-done; !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("KeepAlive of an expired lease = %v, want ErrLeaseNotFound", err)
	}
	wantAbsent(t, s, storage.OwnerKey(1))
}

func testLeaseExpires(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, time.Second) // etcd raises it to its minimum, 2 s
	if err := s.PutLeased(ctx, "exp/node", nil, lease); err != nil {
		t.Fatal(err)
	}
	claimOne(t, s, lease, 9)
	waitFor(t, "the lease to expire", 20*time.Second, func() bool {
		_, err := s.Get(ctx, "exp/node")
		return errors.Is(err, storage.ErrNotFound)
	})
	cs, err := s.Claims(ctx)
	if err != nil || len(cs) != 0 {
		t.Fatalf("Claims after expiry = %+v, %v; want none", cs, err)
	}
	if err := s.KeepAlive(ctx, lease, nil); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("KeepAlive of an expired lease = %v, want ErrLeaseNotFound", err)
	}
}

// runCommitter runs a Committer over s until the test ends.
func runCommitter(t *testing.T, s storage.Store, cfg storage.CommitterConfig) *storage.Committer {
	c := storage.NewCommitter(s, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Committer.Run: %v", err)
		}
	})
	return c
}

func testCommitterConcurrent(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(context.WithoutCancel(ctx), lease)
	const partitions, writers, each = 8, 200, 20
	var ps []uint32
	for p := range uint32(partitions) {
		ps = append(ps, p)
	}
	cs, err := s.Claim(ctx, "n1", lease, ps)
	if err != nil || len(cs) != partitions {
		t.Fatalf("Claim = %d claims, %v", len(cs), err)
	}
	c := runCommitter(t, s, storage.DefaultCommitterConfig())
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range writers {
		wg.Go(func() {
			claim := cs[w%partitions]
			for i := range each {
				key := fmt.Sprintf("%s%d/%d", storage.PartitionPrefix(claim.Partition), w, i)
				err := c.Commit(ctx, storage.Txn{
					Fence: storage.Fence{Partition: claim.Partition, Token: claim.Token},
					Ops:   []storage.Op{storage.Put(key, []byte(key))},
				})
				if err != nil {
					failures.Add(1)
					t.Errorf("Commit %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	wantCount(t, s, storage.ActorsPrefix, writers*each)
	kvs := wantListAny(t, s, storage.PartitionPrefix(3), storage.ListOptions{Limit: 5})
	for _, kv := range kvs {
		if string(kv.Value) != kv.Key {
			t.Fatalf("%s = %q", kv.Key, kv.Value)
		}
	}
	st := c.Stats()
	t.Logf("committer stats: %+v (mean batch %.1f)", st, float64(st.BatchedTxns)/float64(st.Batches))
	if st.Committed != writers*each || st.Failed != 0 || st.BatchedTxns != writers*each {
		t.Fatalf("stats %+v, want %d committed", st, writers*each)
	}
	if st.MaxBatch < 2 || st.Batches >= writers*each {
		t.Fatalf("stats %+v: no batch held more than one txn", st)
	}
}

// gatedStore holds its first Commit until the gate opens, so that a test
// can pile txns up behind it, and records the size of every Commit.
type gatedStore struct {
	storage.Store
	entered, gate chan struct{}
	first         atomic.Bool
	mu            sync.Mutex
	sizes         []int
}

func (g *gatedStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(txns))
	g.mu.Unlock()
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Commit(ctx, txns...)
}

func testCommitterFencedInBatch(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, 30*time.Second)
	defer s.RevokeLease(context.WithoutCancel(ctx), lease)
	good := claimOne(t, s, lease, 1)
	stale := claimOne(t, s, lease, 2)
	if _, err := s.Release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	claimOne(t, s, lease, 2)
	commit(t, s, puts("cond/here", ""))

	g := &gatedStore{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
	c := runCommitter(t, g, storage.CommitterConfig{MaxInFlight: 1})
	goodFence := storage.Fence{Partition: 1, Token: good.Token}

	results := make(chan error, 1)
	go func() { results <- c.Commit(ctx, storage.Txn{Fence: goodFence, Ops: puts("b/first", "1").Ops}) }()
	<-g.entered

	const n = 10
	type res struct {
		i   int
		err error
	}
	out := make(chan res, n+2)
	for i := range n {
		go func() {
			err := c.Commit(ctx, storage.Txn{Fence: goodFence, Ops: puts(fmt.Sprintf("b/%d", i), "1").Ops})
			out <- res{i, err}
		}()
	}
	go func() {
		out <- res{-1, c.Commit(ctx, storage.Txn{Fence: storage.Fence{Partition: 2, Token: stale.Token}, Ops: puts("b/stale", "1").Ops})}
	}()
	go func() {
		out <- res{-2, c.Commit(ctx, storage.Txn{Conds: []storage.Cond{storage.Absent("cond/here")}, Ops: puts("b/cond", "1").Ops})}
	}()
	waitFor(t, "txns to queue", 10*time.Second, func() bool { return c.Stats().Waiting == n+2 })
	close(g.gate)
	if err := <-results; err != nil {
		t.Fatalf("first: %v", err)
	}
	for range n + 2 {
		r := <-out
		switch {
		case r.i == -1 && !errors.Is(r.err, storage.ErrFenced):
			t.Errorf("stale txn: %v, want ErrFenced", r.err)
		case r.i == -2 && !errors.Is(r.err, storage.ErrConditionFailed):
			t.Errorf("cond txn: %v, want ErrConditionFailed", r.err)
		case r.i >= 0 && r.err != nil:
			t.Errorf("txn %d: %v", r.i, r.err)
		}
	}
	wantCount(t, s, "b/", n+1)
	wantAbsent(t, s, "b/stale")
	wantAbsent(t, s, "b/cond")
	g.mu.Lock()
	sizes := slices.Clone(g.sizes)
	g.mu.Unlock()
	if len(sizes) < 2 || sizes[1] != n+2 {
		t.Fatalf("commit sizes %v, want the second to pack %d txns", sizes, n+2)
	}
	if st := c.Stats(); st.Committed != n+1 || st.Failed != 2 || st.Retries == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func testCommitterTooLarge(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	c := runCommitter(t, s, storage.DefaultCommitterConfig())
	big := storage.Txn{Ops: []storage.Op{storage.Put("big", make([]byte, 1600<<10))}}
	if err := c.Commit(ctx, big); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Commit of 1.6 MiB = %v, want ErrTooLarge", err)
	}
	if err := c.Commit(ctx, puts("k", "1", "k", "2")); !errors.Is(err, storage.ErrInvalidTxn) {
		t.Fatalf("Commit of a key put twice = %v, want ErrInvalidTxn", err)
	}
	if st := c.Stats(); st.Batches != 0 || st.Failed != 2 {
		t.Fatalf("stats %+v: refused txns must not be sent", st)
	}
	// Large txns that fit alone but not together go in separate batches.
	half := make([]byte, 800<<10)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if err := c.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(fmt.Sprintf("half/%d", i), half)}}); err != nil {
				t.Errorf("Commit of 800 KiB: %v", err)
			}
		})
	}
	wg.Wait()
	wantCount(t, s, "half/", 3)
	wantAbsent(t, s, "big")
}

// testListAtRevision reads keys as they were at past revisions: what a
// node reads to learn whether a write whose outcome it did not hear
// applied before its claim ended.
func testListAtRevision(t *testing.T, s storage.Store, compact func(context.Context, int64) error) {
	ctx := testCtx(t)
	at := func(prefix string, opts storage.ListOptions) []string {
		t.Helper()
		kvs, err := s.List(ctx, prefix, opts)
		if err != nil {
			t.Fatalf("List(%q, %+v): %v", prefix, opts, err)
		}
		var out []string
		for _, kv := range kvs {
			if opts.KeysOnly {
				if kv.Value != nil {
					t.Fatalf("List(%q, keys only) returned a value for %s", prefix, kv.Key)
				}
				out = append(out, kv.Key)
				continue
			}
			out = append(out, kv.Key+"="+string(kv.Value))
		}
		return out
	}
	revOf := func(key string) int64 { return mustGet(t, s, key).ModRevision }
	commit(t, s, puts("r/a", "1", "r/b", "1", "r/c", "1"))
	r1 := revOf("r/a")
	commit(t, s, puts("r/a", "2"))
	r2 := revOf("r/a")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("r/b"), storage.Put("r/d", []byte("1"))}})
	r3 := revOf("r/d")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("r/")}})
	commit(t, s, puts("r/c", "5"))

	for _, tc := range []struct {
		rev  int64
		want []string
	}{
		{r1, []string{"r/a=1", "r/b=1", "r/c=1"}},
		{r2, []string{"r/a=2", "r/b=1", "r/c=1"}},
		{r3, []string{"r/a=2", "r/c=1", "r/d=1"}},
		{r3 + 1, nil},
		{0, []string{"r/c=5"}},
	} {
		if got := at("r/", storage.ListOptions{Revision: tc.rev}); !slices.Equal(got, tc.want) {
			t.Fatalf("List at revision %d = %v, want %v", tc.rev, got, tc.want)
		}
	}
	if got := at("r/", storage.ListOptions{Revision: r2, StartAfter: "r/a", Limit: 1}); !slices.Equal(got, []string{"r/b=1"}) {
		t.Fatalf("List at revision %d after r/a, limit 1 = %v, want [r/b=1]", r2, got)
	}
	if got := at("r/", storage.ListOptions{Revision: r3, KeysOnly: true}); !slices.Equal(got, []string{"r/a", "r/c", "r/d"}) {
		t.Fatalf("keys at revision %d = %v", r3, got)
	}
	// A key read at a revision keeps that revision's metadata.
	if kvs, err := s.List(ctx, "r/a", storage.ListOptions{Revision: r1}); err != nil || len(kvs) != 1 || kvs[0].ModRevision != r1 || kvs[0].CreateRevision != r1 {
		t.Fatalf("r/a at revision %d = %+v, %v", r1, kvs, err)
	}
	if _, err := s.List(ctx, "r/", storage.ListOptions{Revision: revOf("r/c") + 1000}); err == nil {
		t.Fatal("List at a future revision succeeded")
	}
	// Even where nothing can match: the revision is not the caller's to
	// read.
	if _, err := s.List(ctx, "r/", storage.ListOptions{Revision: revOf("r/c") + 1000, StartAfter: "s"}); err == nil {
		t.Fatal("List at a future revision, after every key of the prefix, succeeded")
	}
	if compact == nil {
		return
	}
	if err := compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "r/", storage.ListOptions{Revision: r1}); !errors.Is(err, storage.ErrCompacted) {
		t.Fatalf("List at a compacted revision = %v, want ErrCompacted", err)
	}
	if _, err := s.List(ctx, "r/", storage.ListOptions{Revision: r1, StartAfter: "s"}); !errors.Is(err, storage.ErrCompacted) {
		t.Fatalf("List at a compacted revision, after every key of the prefix = %v, want ErrCompacted", err)
	}
	if got := at("r/", storage.ListOptions{Revision: r3}); !slices.Equal(got, []string{"r/a=2", "r/c=1", "r/d=1"}) {
		t.Fatalf("List at the compaction revision %d = %v", r3, got)
	}
}
