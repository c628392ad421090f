package node

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
)

// A kept-alive connection to the node's HTTP port (metrics and health)
// that sends no next request, as a prober gone without a reset leaves
// one, is closed once idle for the idle timeout: the server set only a
// header timeout, which does not cover the wait for a next request, so
// each such connection stayed open for ever.
func TestHTTPClosesAnIdleKeptAliveConnection(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 4
	cfg.Logger = zap.NewNop()
	cfg.httpIdleTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)

	c, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	limit := 15 * time.Second
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(limit)); err != nil {
		t.Fatal(err)
	}
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("an idle kept-alive connection is still open %v later", limit)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read on an idle kept-alive connection: %v, want the server's close (EOF)", err)
	}
	t.Logf("closed %v after its last request", time.Since(start))
}
