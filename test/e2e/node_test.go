package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// The README's quick tour: a node with no setup; increment twice.
func TestQuickstartWithRivetctl(t *testing.T) {
	n := newNode(t)
	n.start()
	for _, want := range []string{"5", "10"} {
		out, errOut, code := n.rivetctl("call", "counter", "main", "increment", "5")
		if code != 0 || out != want {
			t.Fatalf("rivetctl call = %q (stderr %q, exit %d), want %s", out, errOut, code, want)
		}
	}
	out, _, code := n.rivetctl("state", "counter", "main")
	if code != 0 || strings.Join(strings.Fields(out), "") != `{"count":10}` {
		t.Fatalf("rivetctl state = %q (exit %d)", out, code)
	}
	if err := n.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, n.log())
	}
}

// Kill the node right after a call returned: the restarted node has it.
func TestKillRightAfterReplyLosesNothing(t *testing.T) {
	n := newNode(t)
	n.start()
	for i := 1; i <= 3; i++ {
		out, errOut, code := n.rivetctl("call", "counter", "k", "increment", "1")
		if code != 0 {
			t.Fatalf("call: %s", errOut)
		}
		n.kill()
		n.start()
		out, errOut, code = n.rivetctl("state", "counter", "k")
		var st struct{ Count int }
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Count != i {
			t.Fatalf("after kill %d: state %q (%s), want count %d", i, out, errOut, i)
		}
	}
}

// 200 increments from 4 callers, SIGKILL in the middle: no increment that
// returned is lost, and none is applied that was never sent.
func TestKill9DuringLoadLosesNoAcknowledgedIncrement(t *testing.T) {
	n := newNode(t)
	n.start()
	c, err := client.New(n.grpcAddr, client.WithRetry(50*time.Millisecond, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const workers, each = 4, 50
	var acked, attempts atomic.Int64
	killed := make(chan struct{})
	var killOnce sync.Once
	var wg sync.WaitGroup
	h := c.Actor("counter", "load")
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				attempts.Add(1)
				if _, err := rivet.Call[int](ctx, h, "increment", 1); err != nil {
					if ctx.Err() != nil {
						return
					}
					// The outcome is unknown: try again (counted as an
					// attempt), after a pause while the node restarts.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				done++
				if acked.Add(1) == workers*each/2 {
					killOnce.Do(func() { close(killed) })
				}
			}
		}()
	}
	<-killed
	n.kill()
	killedAt := acked.Load()
	n.start()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("load did not finish")
	}
	got, err := rivet.Call[int](ctx, h, "getCount")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed after %d acks; %d acked, %d attempts, count %d", killedAt, acked.Load(), attempts.Load(), got)
	if got < int(acked.Load()) || got > int(attempts.Load()) {
		t.Fatalf("count %d outside [acked %d, attempts %d]: acknowledged increments were lost or phantom ones applied", got, acked.Load(), attempts.Load())
	}
}

// Bad input gets one clear line, the right code, a non-zero exit, and
// changes nothing.
func TestBadInputThroughRivetctl(t *testing.T) {
	n := newNode(t)
	n.start()
	if _, errOut, code := n.rivetctl("call", "counter", "main", "increment", "1"); code != 0 {
		t.Fatal(errOut)
	}
	key2k := strings.Repeat("k", 2048)
	cases := []struct {
		name string
		args []string
		code string
	}{
		{"unknown actor", []string{"call", "nope", "main", "x"}, "NOT_FOUND"},
		{"unknown action", []string{"call", "counter", "main", "decrement", "1"}, "NOT_FOUND"},
		{"unknown queue", []string{"send", "counter", "main", "nope", "{}"}, "NOT_FOUND"},
		{"malformed args", []string{"call", "counter", "main", "increment", "{nope"}, ""},
		{"wrong arg type", []string{"call", "counter", "main", "increment", `"five"`}, "INVALID_ARGUMENT"},
		{"2 KiB key", []string{"call", "counter", key2k, "increment", "1"}, "INVALID_ARGUMENT"},
		{"get of a missing actor", []string{"call", "--no-create", "counter", "missing", "getCount"}, "NOT_FOUND"},
		{"create of an existing actor", []string{"create", "counter", "main"}, "ALREADY_EXISTS"},
	}
	for _, c := range cases {
		out, errOut, code := n.rivetctl(c.args...)
		if code == 0 {
			t.Errorf("%s: exit 0, output %q", c.name, out)
			continue
		}
		if strings.Count(errOut, "\n") != 0 || errOut == "" {
			t.Errorf("%s: want one line on stderr, got %q", c.name, errOut)
		}
		if c.code != "" && !strings.Contains(errOut, c.code) {
			t.Errorf("%s: stderr %q does not name %s", c.name, errOut, c.code)
		}
	}

	// A 5 MiB argument cannot travel on a command line: use the Go client.
	c, err := client.New(n.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", 5<<20)
	_, err = c.Actor("counter", "main").Call(ctx, "increment", big)
	if !errors.Is(err, rivet.ErrTooLarge) || client.Code(err).String() != "ResourceExhausted" {
		t.Fatalf("5 MiB argument: %v (code %v), want RESOURCE_EXHAUSTED", err, client.Code(err))
	}
	if _, err := c.Actor("counter", "missing").NoCreate().Info(ctx); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Get of a missing actor: %v, want ErrNotFound", err)
	}
	if list, err := c.ListAll(ctx, ""); err != nil || len(list) != 1 {
		t.Fatalf("actors after bad input = %v (%v), want only counter main", list, err)
	}
	out, _, _ := n.rivetctl("state", "counter", "main")
	if strings.Join(strings.Fields(out), "") != `{"count":1}` {
		t.Fatalf("state after bad input = %s, want count 1", out)
	}
}
