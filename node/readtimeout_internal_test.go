package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A call whose request does not come within the request read timeout is
// dropped (server's TestStalledRequestIsDropped); the node counts it in
// rivet_request_read_timeouts_total and warns, once a minute, with the
// caller's address and nothing of the call: before, a caller holding the
// node's memory with requests it never finished left no trace an operator
// could see.
func TestStalledRequestsAreCountedAndTold(t *testing.T) {
	const token = "s3cret"
	reg, cfg, logs := watchedCounterNode(t)
	cfg.Token = token
	cfg.requestReadTimeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)

	// stall opens a connection and sends a call's headers, with the
	// token, and none of its request.
	stall := func() net.Conn {
		t.Helper()
		c, fr := dialHTTP2(t, n.GRPCAddr())
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/rivet.v1.ActorService/Call"},
			{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"authorization", "Bearer " + token}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := portSeries(t, n)["rivet_request_read_timeouts_total"]; got != 0 {
		t.Fatalf("rivet_request_read_timeouts_total = %v before any call, want 0", got)
	}
	first := stall()
	awaitPortSeries(t, n, map[string]float64{"rivet_request_read_timeouts_total": 1})
	told := awaitWarnings(t, logs, "request read timeout", 1)
	if len(told) != 1 || told[0].ContextMap()["peer"] != first.LocalAddr().String() {
		t.Fatalf("warnings of dropped calls: %+v; want one, with the caller's address %s", told, first.LocalAddr())
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message, token) || strings.Contains(strings.Join(fieldStrings(e), " "), token) {
			t.Fatalf("a warning holds the token: %+v", e)
		}
	}
	stall()
	awaitPortSeries(t, n, map[string]float64{"rivet_request_read_timeouts_total": 2})
	if told := logs.FilterMessageSnippet("request read timeout").Len(); told != 1 {
		t.Fatalf("%d warnings of dropped calls within a minute, want 1", told)
	}
}

func fieldStrings(e observer.LoggedEntry) []string {
	var out []string
	for k, v := range e.ContextMap() {
		out = append(out, k, fmt.Sprint(v))
	}
	return out
}
