package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// rawHTTP2 opens an HTTP/2 connection to addr that has sent its preface
// and SETTINGS, for a test to speak frames the way no gRPC client would;
// it closes with the test, and any read or write waits at most 10 s.
func rawHTTP2(t *testing.T, addr string) *http2.Framer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// serverLimits returns the default limits with a small result limit.
func serverLimits(maxResult int) server.Limits {
	l := server.DefaultLimits()
	l.MaxResultBytes = maxResult
	return l
}

// A request's headers are read, and held, before anything checks its
// token (AuthTapHandle runs once they are): gRPC's default bound is 16 MiB
// per request, which a caller without the token could make a node take in
// on every stream. A node refuses a header list over 64 KiB (any client's
// metadata fits) as it reads it, resetting the stream; this raw HTTP/2
// client ignores the bound the node advertises, as an abusive one would.
func TestAHugeHeaderListIsRefused(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	// 16 KiB of metadata, more than any client sends, goes through.
	actors, _ := dial(t, addr)
	md := metadata.AppendToOutgoingContext(ctx(t), "x-padding", strings.Repeat("a", 16<<10))
	if _, err := actors.Get(md, &rivetv1.GetRequest{Actor: ref("a", "k")}); status.Code(err) != codes.NotFound {
		t.Fatalf("a call with 16 KiB of metadata: %v, want the fake's NOT_FOUND", err)
	}
	fr := rawHTTP2(t, addr)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", rivetv1.ActorService_Get_FullMethodName}, {":authority", "node"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	}
	for i := range 128 { // 1 MiB
		fields = append(fields, [2]string{fmt.Sprintf("x-padding-%d", i), strings.Repeat("a", 8<<10)})
	}
	for _, h := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]}); err != nil {
			t.Fatal(err)
		}
	}
	// The node may close the connection before it has all of them:
	// written beside the reads, whose answer says.
	go func() {
		b := block.Bytes()
		const frame = 16 << 10
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:frame], EndStream: true}) != nil {
			return
		}
		for b = b[frame:]; len(b) > 0; {
			n := min(len(b), frame)
			if fr.WriteContinuation(1, n == len(b), b[:n]) != nil {
				return
			}
			b = b[n:]
		}
	}()
	for {
		fm, err := fr.ReadFrame()
		var ne net.Error
		switch fm := fm.(type) {
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return // the stream refused, or the connection with it
		case *http2.HeadersFrame:
			t.Fatalf("the node answered a request with 1 MiB of headers (stream %d) rather than refuse it", fm.StreamID)
		case nil:
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer from the node: %v", err)
			}
			return // the connection closed on it
		}
	}
}

// A node bounds the streams one connection may have open at once, and
// says so in its first SETTINGS: without a bound (gRPC's default) one
// connection could make it run any number of handlers, each a goroutine
// and a stream's state, and a client that opens and resets streams at
// once (HTTP/2 rapid reset) would meet no limit at all. The bound must
// leave room for every subscription the node can hold on one connection
// (a relaying peer's, or one Go client's) and calls in flight besides: a
// Go client past it waits for a stream to end, unary calls included.
func TestAConnectionsStreamsAreBounded(t *testing.T) {
	if server.MaxConcurrentStreams < runtime.MaxSubscribers+8192 {
		t.Fatalf("MaxConcurrentStreams %d leaves no room for calls beside %d subscriptions on one connection", server.MaxConcurrentStreams, runtime.MaxSubscribers)
	}
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	fr := rawHTTP2(t, addr)
	fm, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := fm.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("the node's first frame is %v, want its SETTINGS", fm)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != server.MaxConcurrentStreams {
		t.Fatalf("the node's SETTINGS_MAX_CONCURRENT_STREAMS: %d (sent: %v), want %d", v, ok, server.MaxConcurrentStreams)
	}
}
