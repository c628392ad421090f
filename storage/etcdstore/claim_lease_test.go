package etcdstore_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A Claim that finds every partition it asks for owned already checks that
// its lease is still alive, to report a lost one. etcd gives a lease's time
// to live in whole seconds, rounded down: a lease with less than a second
// left is alive at 0 (a gone one is at -1). Taken for gone, a node whose
// renewals were a little late, or whose TTL is short, was told it had lost
// a lease it held: its re-establishment failed and started again with a new
// lease, and a partition re-fenced after a write in doubt, claimed again
// meanwhile by the node itself, was claimed again and again for as long as
// the lease lasted, its actors' writes refused all the while (found by
// cutting a node off etcd repeatedly: a reminder whose send was
// acknowledged never fired).
func TestAClaimOfOwnedPartitionsWithUnderASecondLeftIsNotALostLease(t *testing.T) {
	cli := etcdtest.StartClient(t)
	st, err := etcdstore.New(cli, "/claim-lease/")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner, err := st.GrantLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "other", owner, []uint32{1}); err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Until etcd says under a second is left (it may have raised the TTL
	// to its minimum).
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err != nil {
			t.Fatal(err)
		}
		if resp.TTL == 0 {
			break
		}
		if resp.TTL < 0 || time.Now().After(deadline) {
			t.Fatalf("lease time to live %d, never 0 while alive", resp.TTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	claims, err := st.Claim(ctx, "me", lease, []uint32{1})
	if err != nil || len(claims) != 0 {
		t.Fatalf("claim of an owned partition with a live lease: %v, %v; want none, no error", claims, err)
	}
}
