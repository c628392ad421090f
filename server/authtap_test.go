package server_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/auth"
)

// payloadCounter is a stats.Handler that counts the request bytes the
// server received as messages: gRPC reports a payload once it has read it
// whole, before any interceptor runs.
type payloadCounter struct{ bytes atomic.Int64 }

func (p *payloadCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (p *payloadCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		p.bytes.Add(int64(in.WireLength))
	}
}
func (p *payloadCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (p *payloadCounter) HandleConn(context.Context, stats.ConnStats) {}

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// A caller without the token is refused from the headers of its call,
// before the node reads its request: an 8 MiB request (under the
// transport's 9 MiB bound) is not taken in as a message, and the node
// reads from the connection no more of it than one stream window (4 MiB),
// not the 8 MiB sent. The same request with the token is read, which
// shows that the counts see a request read.
func TestRefusedCallIsNotRead(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: raw}
	payloads := new(payloadCounter)
	serveAsNodeOn(t, lis, "s3cret", grpc.StatsHandler(payloads))
	conn, err := grpc.NewClient(raw.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	actors := rivetv1.NewActorServiceClient(conn)
	const size = 8 << 20
	args := append(append([]byte(`["`), bytes.Repeat([]byte("a"), size)...), `"]`...)
	req := &rivetv1.CallRequest{Actor: ref("counter", "k"), Action: "increment", Args: args}

	before := lis.read.Load()
	_, err = actors.Call(ctx(t), req)
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != auth.ErrNoToken.Error() {
		t.Fatalf("8 MiB call without the token: %v, want UNAUTHENTICATED %q", err, auth.ErrNoToken)
	}
	if n := payloads.bytes.Load(); n != 0 {
		t.Errorf("the node read a request of %d bytes from a caller without the token", n)
	}
	if n := lis.read.Load() - before; n > 5<<20 {
		t.Errorf("the node read %d bytes of a refused 8 MiB request, want at most a stream window (4 MiB)", n)
	}

	// The control: with the token the request is read (and refused for
	// its size, which only reading it tells).
	_, err = actors.Call(withAuth(ctx(t), "Bearer s3cret"), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("8 MiB call with the token: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := payloads.bytes.Load(); n < size {
		t.Errorf("the stats saw %d bytes of the request with the token, want at least %d", n, size)
	}
}
