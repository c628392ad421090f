package storagetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage"
)

// watchWait bounds every wait for a watch response: generous, since a
// loaded machine delays etcd's watch sync loop, and only a failing test
// waits it out.
const watchWait = 20 * time.Second

// recv returns the next response of w.
func recv(t *testing.T, w <-chan storage.WatchResponse) storage.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-w:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return r
	case <-time.After(watchWait):
		t.Fatalf("no watch response within %v", watchWait)
	}
	panic("unreachable")
}

// recvEvents returns the events of the next response of w, which must not
// be an error.
func recvEvents(t *testing.T, w <-chan storage.WatchResponse) storage.WatchResponse {
	t.Helper()
	r := recv(t, w)
	if r.Err != nil {
		t.Fatalf("watch response error: %v", r.Err)
	}
	if len(r.Events) == 0 {
		t.Fatalf("watch response %+v has no events", r)
	}
	return r
}

// wantClosed drains w until it closes and returns the responses it held.
func wantClosed(t *testing.T, w <-chan storage.WatchResponse) []storage.WatchResponse {
	t.Helper()
	var got []storage.WatchResponse
	deadline := time.After(watchWait)
	for {
		select {
		case r, ok := <-w:
			if !ok {
				return got
			}
			got = append(got, r)
		case <-deadline:
			t.Fatalf("watch channel not closed within %v (%d responses)", watchWait, len(got))
		}
	}
}

// storeRev returns the store's current revision.
func storeRev(t *testing.T, s storage.Store) int64 {
	t.Helper()
	_, rev, err := s.ListRev(testCtx(t), "", storage.ListOptions{Limit: 1, KeysOnly: true})
	if err != nil {
		t.Fatalf("ListRev: %v", err)
	}
	return rev
}

// ev is an expected event: a put of key to value, or a delete of key.
type ev struct {
	typ        storage.EventType
	key, value string
}

func put(key, value string) ev { return ev{storage.EventPut, key, value} }
func del(key string) ev        { return ev{storage.EventDelete, key, ""} }

// checkEvents checks that r holds exactly want, all of one revision in
// (before, after], and returns that revision. Puts are checked against the
// key as the store has it now, which the caller has not changed since.
func checkEvents(t *testing.T, s storage.Store, what string, r storage.WatchResponse, before, after int64, want []ev) int64 {
	t.Helper()
	var got []ev
	for _, e := range r.Events {
		g := ev{typ: e.Type, key: e.KV.Key}
		if e.Type == storage.EventPut {
			g.value = string(e.KV.Value)
		}
		got = append(got, g)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: events %v, want %v", what, got, want)
	}
	rev := r.Events[0].KV.ModRevision
	if rev <= before || rev > after {
		t.Fatalf("%s: events at revision %d, want in (%d, %d]", what, rev, before, after)
	}
	if r.Revision < rev || r.Revision > after {
		t.Fatalf("%s: response Revision %d, want in [%d, %d]", what, r.Revision, rev, after)
	}
	for _, e := range r.Events {
		if e.KV.ModRevision != rev {
			t.Fatalf("%s: events of one change at revisions %d and %d", what, rev, e.KV.ModRevision)
		}
		switch e.Type {
		case storage.EventPut:
			kv := mustGet(t, s, e.KV.Key)
			if e.KV.ModRevision != kv.ModRevision || e.KV.CreateRevision != kv.CreateRevision || e.KV.Lease != kv.Lease {
				t.Fatalf("%s: put event %+v, the store has %+v", what, e.KV, kv)
			}
		case storage.EventDelete:
			if e.KV.Value != nil || e.KV.CreateRevision != 0 || e.KV.Lease != 0 {
				t.Fatalf("%s: delete event %+v, want only Key and ModRevision", what, e.KV)
			}
		}
	}
	return rev
}

// Every kind of write shows in a watch of its prefix, once, at its
// revision, with the events of one change in one response.
func testWatchEvents(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	commit(t, s, puts("w/a", "1", "w/b", "2", "x/other", "0"))
	kvs, rev, err := s.ListRev(ctx, "w/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(kvs); !slices.Equal(got, []string{"w/a", "w/b"}) || rev < kvs[1].ModRevision {
		t.Fatalf("ListRev = %q at %d", got, rev)
	}
	if got := storeRev(t, s); got < rev {
		t.Fatalf("ListRev revision %d, but the store is at %d", rev, got)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One watch of the prefix, one of the whole namespace, which must see
	// keys relative to it (and nothing of other namespaces).
	w, all := s.Watch(wctx, "w/", rev+1), s.Watch(wctx, "", rev+1)

	step := func(what string, do func(), wantW, wantAll []ev) {
		t.Helper()
		before := storeRev(t, s)
		do()
		after := storeRev(t, s)
		r := checkEvents(t, s, what+" (namespace)", recvEvents(t, all), before, after, wantAll)
		if wantW != nil {
			if rw := checkEvents(t, s, what+" (prefix)", recvEvents(t, w), before, after, wantW); rw != r {
				t.Fatalf("%s: revision %d in the prefix's watch, %d in the namespace's", what, rw, r)
			}
		}
	}
	step("one commit of two txns", func() {
		commit(t, s, puts("w/c", "3"), storage.Txn{Ops: []storage.Op{storage.Put("w/a", []byte("4")), storage.Put("x/y", []byte("5"))}})
	}, []ev{put("w/c", "3"), put("w/a", "4")}, []ev{put("w/c", "3"), put("w/a", "4"), put("x/y", "5")})
	// Nothing for the prefix: its next response is the next step's.
	step("outside the prefix", func() { commit(t, s, puts("x/z", "6")) }, nil, []ev{put("x/z", "6")})
	step("delete", func() {
		commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("w/b"), storage.Delete("w/none")}})
	}, []ev{del("w/b")}, []ev{del("w/b")})
	step("prefix delete", func() {
		commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("w/"), storage.Put("x/q", []byte("7"))}})
	}, []ev{del("w/a"), del("w/c")}, []ev{del("w/a"), del("w/c"), put("x/q", "7")})
	step("put if absent", func() {
		if _, created, err := s.PutIfAbsent(ctx, "w/p", []byte("8")); err != nil || !created {
			t.Fatalf("PutIfAbsent = %v, %v", created, err)
		}
	}, []ev{put("w/p", "8")}, []ev{put("w/p", "8")})

	lease := grant(t, s, 30*time.Second)
	step("leased put", func() {
		if err := s.PutLeased(ctx, "w/l1", []byte("9"), lease); err != nil {
			t.Fatal(err)
		}
	}, []ev{put("w/l1", "9")}, []ev{put("w/l1", "9")})
	step("claims", func() {
		if cs, err := s.Claim(ctx, "n1", lease, []uint32{6, 5}); err != nil || len(cs) != 2 {
			t.Fatalf("Claim = %+v, %v", cs, err)
		}
	}, nil, []ev{put(storage.OwnerKey(5), "n1"), put(storage.OwnerKey(6), "n1")})
	step("second leased put", func() {
		if err := s.PutLeased(ctx, "w/l2", []byte("10"), lease); err != nil {
			t.Fatal(err)
		}
	}, []ev{put("w/l2", "10")}, []ev{put("w/l2", "10")})
	// The keys of a lease go in one revision, in key order, as etcd
	// revokes a lease in one transaction.
	step("revoke", func() {
		if err := s.RevokeLease(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}, []ev{del("w/l1"), del("w/l2")}, []ev{del(storage.OwnerKey(5)), del(storage.OwnerKey(6)), del("w/l1"), del("w/l2")})

	lease2 := grant(t, s, 30*time.Second)
	defer s.RevokeLease(context.WithoutCancel(ctx), lease2)
	var c storage.Claim
	step("claim", func() { c = claimOne(t, s, lease2, 7) }, nil, []ev{put(storage.OwnerKey(7), "n1")})
	step("release", func() {
		if _, err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}, nil, []ev{del(storage.OwnerKey(7))})
	step("back in the prefix", func() { commit(t, s, puts("w/z", "11")) }, []ev{put("w/z", "11")}, []ev{put("w/z", "11")})
}

// The keys of an expired lease vanish in one revision, and watchers see
// it without anyone else touching the store.
func testWatchLeaseExpiry(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, time.Second) // etcd raises it to its minimum, 2 s
	for _, k := range []string{"we/k", "we/j"} {
		if err := s.PutLeased(ctx, k, nil, lease); err != nil {
			t.Fatal(err)
		}
	}
	_, rev, err := s.ListRev(ctx, "we/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := recvEvents(t, s.Watch(ctx, "we/", rev+1))
	checkEvents(t, s, "lease expiry", r, rev, storeRev(t, s), []ev{del("we/j"), del("we/k")})
}

// ListRev then Watch from its revision + 1 sees every later change once,
// in order, while writers run, even when the reader lags far behind.
func testWatchFollowsWrites(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	const writes = 200
	listAt := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		for i := range writes {
			if i == writes/3 {
				close(listAt)
			}
			txn := puts(fmt.Sprintf("f/%02d", i%40), fmt.Sprint(i))
			switch {
			case i%25 == 24:
				// Many keys in one revision.
				txn = storage.Txn{Ops: []storage.Op{storage.DeletePrefix("f/1")}}
				for j := range 30 {
					txn.Ops = append(txn.Ops, storage.Put(fmt.Sprintf("f/m%02d", j), []byte(fmt.Sprint(i))))
				}
			case i%7 == 6:
				txn = storage.Txn{Ops: []storage.Op{storage.Delete(fmt.Sprintf("f/%02d", (i*3)%40))}}
			}
			if err = s.Commit(ctx, txn); err != nil {
				return
			}
		}
		err = s.Commit(ctx, puts("f/end", ""))
	}()
	<-listAt
	kvs, rev, err := s.ListRev(ctx, "f/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.Watch(ctx, "f/", rev+1)
	// Read nothing until the writers are done, so that the watch falls
	// behind and catches up.
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	end := mustGet(t, s, "f/end").ModRevision
	state := make(map[string]storage.KV)
	for _, kv := range kvs {
		state[kv.Key] = kv
	}
	last, lastResp := rev, rev
	for last < end {
		r := recvEvents(t, w)
		if first := r.Events[0].KV.ModRevision; first <= lastResp {
			t.Fatalf("response from revision %d after one up to %d: a revision was split or repeated", first, lastResp)
		}
		for _, e := range r.Events {
			if e.KV.ModRevision < last {
				t.Fatalf("event at revision %d after one at %d", e.KV.ModRevision, last)
			}
			last = e.KV.ModRevision
			if e.Type == storage.EventPut {
				state[e.KV.Key] = e.KV
			} else {
				delete(state, e.KV.Key)
			}
		}
		if r.Revision < last {
			t.Fatalf("response Revision %d before its last event's %d", r.Revision, last)
		}
		lastResp = r.Revision
	}
	want := wantListAny(t, s, "f/", storage.ListOptions{})
	got := make([]storage.KV, 0, len(state))
	for _, k := range slices.Sorted(maps.Keys(state)) {
		got = append(got, state[k])
	}
	if d := diffKVs(got, want); d != "" {
		t.Fatalf("list + watch differs from the store: %s", d)
	}
}

// diffKVs describes the first difference between two key-ordered lists.
func diffKVs(got, want []storage.KV) string {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Sprintf("missing %q", want[i].Key)
		case i >= len(want):
			return fmt.Sprintf("extra %q", got[i].Key)
		case got[i].Key != want[i].Key:
			return fmt.Sprintf("key %d is %q, want %q", i, got[i].Key, want[i].Key)
		case string(got[i].Value) != string(want[i].Value) || got[i].ModRevision != want[i].ModRevision ||
			got[i].CreateRevision != want[i].CreateRevision || got[i].Lease != want[i].Lease:
			return fmt.Sprintf("%q is %q (revisions %d/%d, lease %x), want %q (%d/%d, lease %x)", got[i].Key,
				got[i].Value, got[i].CreateRevision, got[i].ModRevision, got[i].Lease,
				want[i].Value, want[i].CreateRevision, want[i].ModRevision, want[i].Lease)
		}
	}
	return ""
}

// A watch from a compacted revision fails with ErrCompacted and ends; one
// from the compaction revision on works.
func testWatchCompacted(t *testing.T, s storage.Store, compact func(context.Context, int64) error) {
	if compact == nil {
		t.Skip("the harness cannot compact")
	}
	ctx := testCtx(t)
	commit(t, s, puts("k/a", "1"))
	_, old, err := s.ListRev(ctx, "k/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, puts("k/a", "2"))
	commit(t, s, puts("k/b", "3"))
	now := storeRev(t, s)
	if err := compact(ctx, now); err != nil {
		t.Fatalf("Compact(%d): %v", now, err)
	}
	w := s.Watch(ctx, "k/", old+1)
	if r := recv(t, w); !errors.Is(r.Err, storage.ErrCompacted) {
		t.Fatalf("watch from compacted revision %d (compacted at %d) = %+v, want ErrCompacted", old+1, now, r)
	}
	if rest := wantClosed(t, w); len(rest) > 0 {
		t.Fatalf("responses after the error: %+v", rest)
	}
	// The store reads fine after a compaction, and a watch from its
	// revision + 1 follows it.
	kvs, rev, err := s.ListRev(ctx, "k/", storage.ListOptions{})
	if err != nil || len(kvs) != 2 || rev < now {
		t.Fatalf("ListRev after compaction = %d keys at %d, %v", len(kvs), rev, err)
	}
	w = s.Watch(ctx, "k/", rev+1)
	commit(t, s, puts("k/c", "4"))
	checkEvents(t, s, "after compaction", recvEvents(t, w), rev, storeRev(t, s), []ev{put("k/c", "4")})
}

// A watch ends when its ctx is done, even with responses its reader never
// took.
func testWatchCancel(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	wctx, cancel := context.WithCancel(ctx)
	rev := storeRev(t, s)
	idle, busy := s.Watch(wctx, "none/", rev+1), s.Watch(wctx, "c/", rev+1)
	// More changes than any buffer holds, none of them read.
	for i := range 50 {
		commit(t, s, puts(fmt.Sprintf("c/%d", i), ""))
	}
	cancel()
	wantClosed(t, idle)
	n := 0
	for _, r := range wantClosed(t, busy) {
		if r.Err != nil {
			t.Fatalf("response error after cancel: %v", r.Err)
		}
		n += len(r.Events)
	}
	if n > 50 {
		t.Fatalf("%d events of 50 changes", n)
	}
	// A ctx done before the call ends the watch too.
	wantClosed(t, s.Watch(wctx, "c/", rev+1))
}

// Closing the store ends its watches with ErrClosed.
func testWatchClosed(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	rev := storeRev(t, s)
	w := s.Watch(ctx, "z/", rev+1)
	commit(t, s, puts("z/a", ""))
	recvEvents(t, w) // the watch is established
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rs := wantClosed(t, w)
	if len(rs) == 0 || !errors.Is(rs[len(rs)-1].Err, storage.ErrClosed) {
		t.Fatalf("watch responses after Close = %+v, want ErrClosed last", rs)
	}
	rs = wantClosed(t, s.Watch(ctx, "z/", rev+1))
	if len(rs) != 1 || !errors.Is(rs[0].Err, storage.ErrClosed) {
		t.Fatalf("watch after Close = %+v, want one ErrClosed", rs)
	}
}
