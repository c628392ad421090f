package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A list whose keys and values add up to more than the client may receive
// in one message (a node's etcd client: 64 MiB) reads them a page at a
// time, at one revision, rather than failing: each key's value is bounded
// by a transaction's size, but their total is not (a workflow's history of
// large step outputs, every one of an actor's queued messages), and such
// an actor could not be loaded at all, nor its history read.
func TestAListLargerThanAClientMessageIsReadInPages(t *testing.T) {
	const (
		maxRecv = 64 << 10
		keys    = 100
		size    = 4 << 10 // 400 KiB in all
	)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcdtest.Start(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallRecvMsgSize: maxRecv,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := externalStore(t, cli, "/big-list/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(i int) {
		v := strings.Repeat(string(rune('a'+i%26)), size)
		if err := s.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(fmt.Sprintf("p/%03d", i), []byte(v))}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		put(i)
	}
	check := func(what string, kvs []storage.KV, err error, from, n int, keysOnly bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(kvs) != n {
			t.Fatalf("%s: %d keys, want %d", what, len(kvs), n)
		}
		for j, kv := range kvs {
			i := from + j
			if kv.Key != fmt.Sprintf("p/%03d", i) {
				t.Fatalf("%s: key %d is %q", what, j, kv.Key)
			}
			if want := size; !keysOnly && (len(kv.Value) != want || kv.Value[0] != byte('a'+i%26)) {
				t.Fatalf("%s: %s has %d bytes %.1q", what, kv.Key, len(kv.Value), kv.Value)
			}
		}
	}
	kvs, rev, err := s.ListRev(ctx, "p/", storage.ListOptions{})
	check("list", kvs, err, 0, keys, false)
	kvs, err = s.List(ctx, "p/", storage.ListOptions{StartAfter: "p/009", Limit: 50})
	check("a page of 50 after the 10th", kvs, err, 10, 50, false)
	kvs, err = s.List(ctx, "p/", storage.ListOptions{KeysOnly: true})
	check("keys only", kvs, err, 0, keys, true)

	// The pages are read at one revision: the list's, or the one asked.
	put(keys)
	kvs, err = s.List(ctx, "p/", storage.ListOptions{Revision: rev})
	check("list at the first list's revision", kvs, err, 0, keys, false)
	kvs, _, err = s.ListRev(ctx, "p/", storage.ListOptions{})
	check("list after a put", kvs, err, 0, keys+1, false)
}
