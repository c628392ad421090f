package client_test

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// countingFake answers every action with its name and counts the calls.
func countingFake(name string, n *atomic.Int64) *servertest.Fake {
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		n.Add(1)
		return json.RawMessage(`"` + name + `"`), nil
	}
	return f
}

// With direct routing, actor calls go to the owner named by the partition
// table, not to the node the client was made with; an owner address the
// client cannot dial falls back to that node.
func TestDirectRoutingSendsCallsToTheOwner(t *testing.T) {
	var atA, atB atomic.Int64
	a := countingFake("a", &atA)
	aAddr := servertest.Start(t, a, servertest.Config{})
	b := countingFake("b", &atB)
	// A port nothing listens on, for the unreachable owner.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	b.MemberList = []runtime.Member{
		{NodeID: "a", GRPCAddr: aAddr, State: "alive"},
		{NodeID: "b", GRPCAddr: "unused", State: "alive"},
		{NodeID: "c", GRPCAddr: dead, State: "alive"},
	}
	b.PartitionCount = 2
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}, {Partition: 1, Owner: "c"}}
	bAddr := servertest.Start(t, b, servertest.Config{})

	c := newClient(t, bAddr, client.WithDirectRouting(50*time.Millisecond))
	ctx := context.Background()
	// Keys by partition (2 partitions): find one of each.
	keyOn := map[uint32]string{}
	for i := 0; len(keyOn) < 2 && i < 100; i++ {
		k := string(rune('a' + i))
		keyOn[client.PartitionOf("counter", k, 2)] = k
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.GetOrCreate("counter", keyOn[0]).Call(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) == `"a"` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls on partition 0 still served by %s, want a (the owner)", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The owner of partition 1 cannot be dialed: the call still succeeds,
	// through b.
	out, err := c.GetOrCreate("counter", keyOn[1]).Call(ctx, "x")
	if err != nil || string(out) != `"b"` {
		t.Fatalf("call whose owner is unreachable: %s, %v; want it served through b", out, err)
	}
	if atA.Load() == 0 {
		t.Fatal("a served nothing")
	}
}
