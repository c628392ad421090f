package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// BenchmarkPeerCall measures one small Call over loopback, with a backend
// that answers at once, 16 callers at a time: "unary" as a client calls a
// node, "stream" as a node forwards to another over a PeerConn. It isolates
// the cost of the forwarding hop from the runtime's and from other work on
// the machine; BenchmarkForwarding in package node measures the whole path.
func BenchmarkPeerCall(b *testing.B) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return json.RawMessage(`{"count":1}`), nil
	}
	pc, _ := peerPair(b, f)
	conn := pc.Conn()
	req := &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "getCount", Args: []byte(`[]`)}
	for _, c := range []struct {
		name string
		conn grpc.ClientConnInterface
	}{{"unary", conn}, {"stream", pc}} {
		b.Run(c.name, func(b *testing.B) {
			cl := rivetv1.NewActorServiceClient(c.conn)
			if _, err := cl.Call(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(8) // 16 callers on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cl.Call(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
