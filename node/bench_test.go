package node_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
)

// echoServer is the baseline: a plain gRPC unary echo, no actor, no storage.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoServer) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: req.GetPayload()}, nil
}

func startEcho(b *testing.B) testgrpc.TestServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, echoServer{})
	go s.Serve(lis)
	b.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// benchClient starts a node with the examples and returns a client of it.
func benchClient(b *testing.B) *client.Client {
	reg, err := examples.Registry()
	if err != nil {
		b.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(b.TempDir())
	cfg.Logger = zap.NewNop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(b, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkCalls measures action calls through a real node (gRPC on
// loopback, embedded etcd with fsync) beside a plain gRPC echo server in the
// same run, at 1, 16 and 64 concurrent callers:
//
//   - echo: the gRPC baseline;
//   - query: a read-only action (counter getCount);
//   - mutate: a state-changing action (counter increment), each caller on
//     its own actor, the reply sent only once the change is durable;
//   - mutate-hot: the same, every caller on ONE actor.
//
// Reported: calls/s and p50/p99 latency in microseconds.
func BenchmarkCalls(b *testing.B) {
	c := benchClient(b)
	echo := startEcho(b)
	ctx := context.Background()
	payload := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("[1]")}}
	for _, mode := range []string{"echo", "query", "mutate", "mutate-hot"} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode, callers), func(b *testing.B) {
				do := make([]func() error, callers)
				for i := range callers {
					key := fmt.Sprintf("bench-%d", i)
					if mode == "mutate-hot" {
						key = "bench-hot"
					}
					h := c.Actor("counter", key)
					switch mode {
					case "echo":
						do[i] = func() error { _, err := echo.UnaryCall(ctx, payload); return err }
					case "query":
						do[i] = func() error { _, err := h.Call(ctx, "getCount"); return err }
					default:
						do[i] = func() error { _, err := h.Call(ctx, "increment", 1); return err }
					}
					if err := do[i](); err != nil { // warm up: activate the actor
						b.Fatal(err)
					}
				}
				rate, all := driveCallers(b, do)
				b.ReportMetric(rate, "calls/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// driveCallers shares b.N calls among the callers, one do func each, and
// returns the calls per second and the sorted latencies. It fails the
// benchmark if any call fails.
func driveCallers(b *testing.B, do []func() error) (rate float64, lat []time.Duration) {
	b.Helper()
	per := make([][]time.Duration, len(do))
	var next, failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range do {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := do[i](); err != nil {
					failed.Add(1)
				}
				per[i] = append(per[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d calls failed", failed.Load())
	}
	lat = slices.Concat(per...)
	slices.Sort(lat)
	return float64(b.N) / elapsed.Seconds(), lat
}
