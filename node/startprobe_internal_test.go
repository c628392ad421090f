package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage"
)

// probe GETs url, for its status and body (err: no answer within the
// client's timeout, or none at all).
func probe(hc *http.Client, url string) (int, string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// awaitProbe polls url until it answers code with a body containing want,
// for up to within, and returns the last answer.
func awaitProbe(t *testing.T, url string, code int, want string, within time.Duration) (int, string, error) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		c, body, err := probe(hc, url)
		if (err == nil && c == code && strings.Contains(body, want)) || time.Now().After(deadline) {
			return c, body, err
		}
		time.Sleep(20 * time.Millisecond) // between polls of a condition, bounded by the deadline
	}
}

// A node that waits at start for an etcd that does not answer is alive:
// /healthz answers 200 at once, saying what it waits for, and /readyz 503.
// The HTTP server started only once the node served: /healthz accepted
// the connection and never answered, and a liveness probe restarted the
// node in a loop (with an embedded member, taking the member down each
// time).
func TestAStartingNodeIsLiveButNotReadyWhileItWaitsForEtcd(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.EtcdEndpoints = []string{"http://" + freeLoopbackAddr(t)} // nothing listens there
	cfg.HTTPAddr = freeLoopbackAddr(t)
	cfg.Logger = zap.NewNop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n, err := Start(ctx, cfg, reg)
		if n != nil {
			_ = n.Stop(context.Background())
			err = errors.New("started with no etcd")
		}
		done <- err
	}()

	code, body, err := awaitProbe(t, "http://"+cfg.HTTPAddr+"/healthz", http.StatusOK, "starting, waiting for etcd", 20*time.Second)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "starting, waiting for etcd") {
		t.Errorf("/healthz of a node waiting for etcd: %d %q, %v; want 200 saying it waits for etcd", code, body, err)
	}
	code, body, err = probe(&http.Client{Timeout: 5 * time.Second}, "http://"+cfg.HTTPAddr+"/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for etcd") {
		t.Errorf("/readyz of a node waiting for etcd: %d %q, %v; want 503 saying it waits for etcd", code, body, err)
	}
	code, _, err = probe(&http.Client{Timeout: 5 * time.Second}, "http://"+cfg.HTTPAddr+"/metrics")
	if err != nil || code != http.StatusOK {
		t.Errorf("/metrics of a node waiting for etcd: %d, %v; want 200", code, err)
	}

	cancel()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Errorf("start cancelled while waiting for etcd: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the start did not end within 30 s of its ctx")
	}
	if _, _, err := probe(&http.Client{Timeout: 5 * time.Second}, "http://"+cfg.HTTPAddr+"/healthz"); err == nil {
		t.Error("/healthz still answers after the start failed")
	}
}

// fullStore is a store whose etcd is out of space: every put is refused.
type fullStore struct{ storage.Store }

func (fullStore) PutIfAbsent(context.Context, string, []byte) ([]byte, bool, error) {
	return nil, false, fmt.Errorf("%w: %w: etcd is out of space (alarm NOSPACE): not sent", storage.ErrRefused, storage.ErrNoSpace)
}

// A stop asked for while a starting node waits for etcd to have space
// ends the start with ctx's error, which Run takes for a stop: it was the
// out-of-space error, and a node stopped during the wait exited 1,
// logging "exiting on an error".
func TestAStopDuringTheWaitForSpaceIsAStop(t *testing.T) {
	t.Parallel()
	n := &Node{cfg: Config{Partitions: 8}, log: zap.NewNop(), store: fullStore{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.firstContact(ctx, []string{"http://etcd:2379"})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if w := n.startWait.Load(); w != nil && strings.Contains(*w, "out of space") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("firstContact returned (%v) while etcd was out of space", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not say within 10 s that it waits for etcd to have space")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "out of space") {
			t.Errorf("firstContact stopped during the wait for space: %v, want context.Canceled, saying what it waited for", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("firstContact did not return within 10 s of its ctx")
	}
}
