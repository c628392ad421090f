package server_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rivet-go/rivet/server"
)

// A call whose request stops coming part way (its length prefix says 8
// MiB, 1 MiB came) is dropped after the request read timeout, with or
// without a token, and with it the bytes the node held for it: before,
// gRPC waited for the rest for as long as the caller kept the connection,
// and 600 such calls on one connection held 2.5 GB of a node. The raw
// HTTP/2 client is needed to stop sending mid-message.
func TestStalledRequestIsDropped(t *testing.T) {
	server.SetRequestReadTimeout(t, 300*time.Millisecond)
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			serveAsNodeOn(t, lis, token)
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
				return
			}
		})
	}
}
