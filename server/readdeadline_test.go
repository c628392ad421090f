package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// A call whose request stops coming part way (its length prefix says 8
// MiB, 1 MiB came) is dropped after the request read timeout, with or
// without a token, and with it the bytes the node held for it: before,
// gRPC waited for the rest for as long as the caller kept the connection,
// and 600 such calls on one connection held 2.5 GB of a node. The raw
// HTTP/2 client is needed to stop sending mid-message. The drop is told
// to OnRequestReadTimeout with the caller's address, the one trace of it
// a node has (the node counts and logs it). The timeout is the option's,
// RequestReadTimeout.
func TestStalledRequestIsDropped(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			dropped := make(chan net.Addr, 4)
			serveAsNodeWith(t, lis, token, []server.AuthOption{
				server.RequestReadTimeout(300 * time.Millisecond),
				server.OnRequestReadTimeout(func(a net.Addr) { dropped <- a }),
			})
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/rivet.v1.ActorService/Call"},
				{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
			if token != "" {
				fields = append(fields, [2]string{"authorization", "Bearer " + token})
			}
			for _, f := range fields {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			prefix := make([]byte, 5)
			binary.BigEndian.PutUint32(prefix[1:], 8<<20)
			if err := fr.WriteData(1, false, prefix); err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 16<<10)
			for range (1 << 20) / len(chunk) {
				if err := fr.WriteData(1, false, chunk); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(10 * time.Second))
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("the stalled call was not dropped within %v: %v", time.Since(start).Round(time.Millisecond), err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						_ = fr.WriteSettingsAck()
					}
					continue
				case *http2.PingFrame:
					if !f.IsAck() {
						_ = fr.WritePing(true, f.Data)
					}
					continue
				case *http2.RSTStreamFrame:
				case *http2.HeadersFrame:
					if !f.StreamEnded() {
						continue
					}
				default:
					continue
				}
				if f.Header().StreamID != 1 {
					continue
				}
				t.Logf("dropped after %v with %T", time.Since(start).Round(time.Millisecond), f)
				break
			}
			select {
			case a := <-dropped:
				if a == nil || a.String() != c.LocalAddr().String() {
					t.Fatalf("OnRequestReadTimeout was told %v, want the caller's address %v", a, c.LocalAddr())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("OnRequestReadTimeout was not called for the dropped call")
			}
			if len(dropped) != 0 {
				t.Fatalf("OnRequestReadTimeout called %d more times for one call", len(dropped))
			}
		})
	}
}

// The request read timeout bounds only the wait for a request: a unary
// call that runs longer than it once its request is in, a health Watch
// and a reflection stream (bidirectional, whose first message may come
// any time) open for several times the timeout are not cut.
func TestReadDeadlineSparesLongCalls(t *testing.T) {
	const timeout = 200 * time.Millisecond
	server.SetRequestReadTimeout(t, timeout)
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, _ runtime.CallRequest) (json.RawMessage, error) {
		select {
		case <-ctx.Done(): // what the timeout, unless disarmed, cancels
			return nil, context.Cause(ctx)
		case <-time.After(5 * timeout): // a long turn
			return json.RawMessage("1"), nil
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := server.DefaultLimits()
	// Nothing is dropped, so nothing is told.
	dropped := server.OnRequestReadTimeout(func(a net.Addr) { t.Errorf("a call from %v was told dropped by the request read timeout", a) })
	gs := grpc.NewServer(append(server.AuthServerOptions("", dropped), server.ServerOptions(limits)...)...)
	srv := server.New(f, server.WithLimits(limits))
	srv.Register(gs)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	defer func() { srv.Shutdown(); gs.Stop(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w, err := healthpb.NewHealthClient(conn).Watch(c, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch = %v, %v; want SERVING", r, err)
	}
	watchEnded := make(chan error, 1)
	go func() {
		_, err := w.Recv()
		watchEnded <- err
	}()
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(c)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := rivetv1.NewActorServiceClient(conn).Call(c, &rivetv1.CallRequest{Actor: ref("counter", "k"), Action: "getCount", Args: []byte("[]")}); err != nil {
		t.Fatalf("a call that ran 5 times the request read timeout: %v", err)
	}
	// io.EOF: the stream has ended, which Recv tells.
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Fatalf("a reflection stream whose first request came 5 times the request read timeout late: %v", err)
	}
	select {
	case err := <-watchEnded:
		t.Fatalf("the health watch ended: %v", err)
	default:
	}
}
