package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
)

// The gRPC port holds at most its bound of connections at once, whoever
// opens them: before, a client that opened 20,000 idle connections (no
// token needed, none is asked before a call) took every file descriptor
// the process could open in 9 s, and the embedded etcd, out of them,
// stopped the node. A connection past the bound is not served (no
// SETTINGS from the node) until one of those held closes.
func TestGRPCPortBoundsItsConnections(t *testing.T) {
	reg, cfg, logs := watchedCounterNode(t)
	cfg.Token = "s3cret"
	cfg.maxGRPCConns = 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)

	// open dials the gRPC port as an HTTP/2 client that sends nothing
	// after its preface, and says whether the node answered with its
	// SETTINGS within wait.
	open := func(wait time.Duration) (net.Conn, bool) {
		t.Helper()
		c, fr := dialHTTP2(t, n.GRPCAddr())
		_ = c.SetReadDeadline(time.Now().Add(wait))
		f, err := fr.ReadFrame()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return c, false
		}
		if err != nil {
			t.Fatalf("reading the node's first frame: %v", err)
		}
		if _, ok := f.(*http2.SettingsFrame); !ok {
			t.Fatalf("the node's first frame is %T, want SETTINGS", f)
		}
		_ = c.SetReadDeadline(time.Time{})
		return c, true
	}
	if got := portSeries(t, n); got[`rivet_port_connections_limit{port="grpc"}`] != 2 || got[`rivet_port_full_total{port="grpc"}`] != 0 {
		t.Fatalf("before any connection: %v; want a limit of 2, never full", got)
	}
	var held []net.Conn
	for i := range 2 {
		c, ok := open(10 * time.Second)
		if !ok {
			t.Fatalf("connection %d of 2 was not served", i+1)
		}
		held = append(held, c)
	}
	third, ok := open(time.Second)
	if ok {
		t.Fatal("a third connection was served beside two held, over the bound of 2")
	}
	// The metrics show the port full, and the node says so once.
	awaitPortSeries(t, n, map[string]float64{`rivet_port_connections{port="grpc"}`: 2, `rivet_port_full_total{port="grpc"}`: 1})
	full := awaitWarnings(t, logs, "holds its bound of connections", 1)
	if len(full) != 1 || full[0].ContextMap()["port"] != "grpc" || full[0].ContextMap()["bound"] != int64(2) ||
		!strings.Contains(full[0].Message, "docs/deploy.md, Security") {
		t.Fatalf("warnings of a full port: %+v; want one, naming the port, its bound and the docs", full)
	}
	held[0].Close()
	// Served once a slot is free: its SETTINGS come now.
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := http2.NewFramer(third, third).ReadFrame()
	if err != nil {
		t.Fatalf("the third connection, once one closed: %v, want the node's SETTINGS", err)
	}
	if _, ok := f.(*http2.SettingsFrame); !ok {
		t.Fatalf("the third connection's first frame is %T, want SETTINGS", f)
	}
	// Full again, with the third in: counted, but within the minute not
	// told again.
	awaitPortSeries(t, n, map[string]float64{`rivet_port_connections{port="grpc"}`: 2, `rivet_port_full_total{port="grpc"}`: 2})
	if full := logs.FilterMessageSnippet("holds its bound of connections").Len(); full != 1 {
		t.Fatalf("%d warnings of a full port within a minute, want 1", full)
	}
	held[1].Close()
	third.Close()
	awaitPortSeries(t, n, map[string]float64{`rivet_port_connections{port="grpc"}`: 0})
}

// portSeries gathers n's collector and returns the port and read timeout
// series, by name and labels as /metrics shows them.
func portSeries(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(n))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "rivet_port_") && mf.GetName() != "rivet_request_read_timeouts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			if m.GetGauge() != nil {
				out[name] = m.GetGauge().GetValue()
			} else {
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// awaitWarnings waits until logs hold at least n entries whose message
// has snippet, and returns them: a node counts a full port or a dropped
// call before it warns, so the series alone do not say the warning has
// been logged yet.
func awaitWarnings(t *testing.T, logs *observer.ObservedLogs, snippet string, n int) []observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := logs.FilterMessageSnippet(snippet).All()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d warnings %q within 10 s, want %d: %+v", len(got), snippet, n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitPortSeries waits until portSeries has want's values.
func awaitPortSeries(t *testing.T, n *Node, want map[string]float64) {
	t.Helper()
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = portSeries(t, n)
		ok := true
		for k, v := range want {
			if g, has := got[k]; !has || g != v {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics %v, want %v within 20 s", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConnLimitsOf(t *testing.T) {
	for _, tc := range []struct {
		nofile     uint64
		grpc, http int
	}{
		{1024, 512, 128},
		{20_000, 10_000, 1024},
		{1 << 20, 65_536, 1024},
		{10, 16, 4},
	} {
		if g, h := connLimitsOf(tc.nofile); g != tc.grpc || h != tc.http {
			t.Errorf("connLimitsOf(%d) = %d, %d; want %d, %d", tc.nofile, g, h, tc.grpc, tc.http)
		}
	}
}

// The HTTP port too holds at most its bound of connections at once: a
// request on a connection past it is answered only once one held closes.
func TestHTTPPortBoundsItsConnections(t *testing.T) {
	reg, cfg, logs := watchedCounterNode(t)
	cfg.maxHTTPConns = 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)

	// healthz sends GET /healthz on a connection of its own and says
	// whether it was answered within wait.
	healthz := func(c net.Conn, wait time.Duration) bool {
		t.Helper()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		if err != nil {
			t.Fatalf("reading /healthz's response: %v", err)
		}
		res.Body.Close()
		return true
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", n.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := dial()
	if !healthz(held, 10*time.Second) {
		t.Fatal("the first connection was not served")
	}
	second := dial()
	if healthz(second, time.Second) {
		t.Fatal("a second connection was served beside one held, over the bound of 1")
	}
	// Read from the registry: a scrape of /metrics would need the slot.
	awaitPortSeries(t, n, map[string]float64{`rivet_port_connections{port="http"}`: 1, `rivet_port_connections_limit{port="http"}`: 1,
		`rivet_port_full_total{port="http"}`: 1, `rivet_port_full_total{port="grpc"}`: 0})
	if full := awaitWarnings(t, logs, "holds its bound of connections", 1); len(full) != 1 || full[0].ContextMap()["port"] != "http" {
		t.Fatalf("warnings of a full port: %+v; want one, of the http port", full)
	}
	held.Close()
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Its request is in: its answer comes once it is accepted.
	res, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil {
		t.Fatalf("the second connection, once the first closed: %v, want /healthz's answer", err)
	}
	res.Body.Close()
}

// dialHTTP2 opens a connection to addr as an HTTP/2 client that has sent
// its preface and SETTINGS and nothing else, closed at the test's end.
func dialHTTP2(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}
