package client_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// formatsCountingFake counts the member lists a node answers and the reads
// of the recorded storage formats it makes for them.
type formatsCountingFake struct {
	*servertest.Fake
	members, formats atomic.Int64
}

func (f *formatsCountingFake) Members(ctx context.Context) ([]runtime.Member, error) {
	f.members.Add(1)
	return f.Fake.Members(ctx)
}

func (f *formatsCountingFake) RecordedFormats(ctx context.Context) ([]int, error) {
	f.formats.Add(1)
	return f.Fake.RecordedFormats(ctx)
}

// A client's direct routing asks for the members every interval within a
// 2 s timeout of its own: a node reads the recorded storage formats from
// etcd (up to 2 s when it is slow) only for a member list that asks for
// them, so that routing does not wait on etcd, nor read it for every
// client every interval.
func TestOnlyAMemberListAsksForTheRecordedFormats(t *testing.T) {
	var calls atomic.Int64
	f := &formatsCountingFake{Fake: countingFake("a", &calls)}
	addr := servertest.Start(t, f, servertest.Config{})
	f.MemberList = []runtime.Member{{NodeID: "a", GRPCAddr: addr, State: "alive"}}
	f.PartitionCount = 1
	f.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}
	c := newClient(t, addr, client.WithDirectRouting(20*time.Millisecond))
	ctx := ctx(t)
	for f.members.Load() < 3 {
		if _, err := c.GetOrCreate("counter", "k").Call(ctx, "x"); err != nil {
			t.Fatalf("call: %v (the router asked for the members %d times)", err, f.members.Load())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the router asked for the members %d times, want 3", f.members.Load())
		case <-time.After(10 * time.Millisecond): // the next call after the routing interval
		}
	}
	if _, err := c.Members(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.formats.Load(); n != 0 {
		t.Fatalf("routing's and Members' member lists read the recorded formats %d times, want none", n)
	}
	ml, err := c.MemberList(ctx)
	if err != nil || !slices.Equal(ml.RecordedFormats, []int{2, 3, 4}) || f.formats.Load() != 1 {
		t.Fatalf("MemberList: recorded formats %v, %v, read %d times; want [2 3 4], read once", ml.RecordedFormats, err, f.formats.Load())
	}
}
