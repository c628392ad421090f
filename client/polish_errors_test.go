package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// Next whose ctx ends says that the wait ended, not the subscription, and
// matches ctx's error (and rivet.ErrTimeout for a deadline, as a call's):
// it returned the bare "context deadline exceeded". The subscription goes
// on: a later Next gets the next event.
func TestNextSaysItsWaitEndedAndTheSubscriptionGoesOn(t *testing.T) {
	f := servertest.NewFake()
	evs := servertest.NewEvents(nil)
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) { return evs, nil }
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	sub, err := c.Actor("counter", "k").Subscribe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	dctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = sub.Next(dctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rivet.ErrTimeout) || errors.Is(err, context.Canceled) {
		t.Errorf("Next past its deadline: %v, want it to match context.DeadlineExceeded and rivet.ErrTimeout", err)
	}
	if err == nil || !strings.Contains(err.Error(), "next event ended (context deadline exceeded)") || !strings.Contains(err.Error(), "the subscription goes on") {
		t.Errorf("Next past its deadline says %q, want what ended and that the subscription goes on", err)
	}

	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sub.Next(cctx); !errors.Is(err, context.Canceled) || errors.Is(err, rivet.ErrTimeout) || err == nil || !strings.Contains(err.Error(), "(context canceled)") {
		t.Errorf("Next with its ctx cancelled: %v, want it to match context.Canceled, and say so", err)
	}
	if err := sub.Err(); err != nil {
		t.Errorf("the subscription ended (%v) with a Next's ctx", err)
	}
	evs.Push(rivet.Event{Name: "newCount", Data: []byte("1")})
	if ev, err := sub.Next(ctx(t)); err != nil || ev.Name != "newCount" {
		t.Errorf("Next after the ones whose ctx ended: %+v, %v, want the event pushed since", ev, err)
	}
}

// A call made after Close says that the client is closed, not gRPC's
// "the client connection is closing", and is what Close's doc says it
// is: Canceled (context.Canceled with errors.Is), not sent.
func TestACallAfterCloseSaysTheClientIsClosed(t *testing.T) {
	c, err := client.New(servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Actor("counter", "k").Call(ctx(t), "increment", 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = c.Actor("counter", "k").Call(ctx(t), "increment", 1)
	if !errors.Is(err, context.Canceled) || client.Code(err).String() != "Canceled" || rivet.OutcomeUnknown(err) {
		t.Errorf("a call after Close: %v (code %v, outcome unknown %v), want Canceled, not sent", err, client.Code(err), rivet.OutcomeUnknown(err))
	}
	if err == nil || !strings.Contains(err.Error(), "the rivet client is closed (Client.Close)") {
		t.Errorf("a call after Close says %q, want that the client is closed", err)
	}
}

// Subscribe after Close says that the client is closed, as a call does:
// the subscription's own context, which Close cancels too, raced the
// attempt, and now and then (about 1 in 200) the error was gRPC's "the
// client connection is closing". Many tries, each a few microseconds,
// make that race show.
func TestASubscribeAfterCloseSaysTheClientIsClosed(t *testing.T) {
	c, err := client.New(servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for i := range 2000 {
		sub, err := c.Actor("counter", "k").Subscribe(ctx(t))
		if err == nil {
			sub.Close()
			t.Fatal("Subscribe after Close succeeded")
		}
		if !errors.Is(err, context.Canceled) || rivet.OutcomeUnknown(err) || !strings.Contains(err.Error(), "the rivet client is closed (Client.Close)") {
			t.Fatalf("Subscribe %d after Close: %v (outcome unknown %v), want Canceled, not sent, saying that the client is closed", i, err, rivet.OutcomeUnknown(err))
		}
	}
}

// A call in flight that Close cuts off says so, and that it may have run.
func TestACallCutOffByCloseSaysTheClientWasClosed(t *testing.T) {
	f := servertest.NewFake()
	entered := make(chan struct{})
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c, err := client.New(servertest.Start(t, f, servertest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Actor("counter", "k").Call(ctx(t), "block")
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not reach the node")
	}
	c.Close()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits after Close")
	}
	if !errors.Is(err, context.Canceled) || !rivet.OutcomeUnknown(err) || err == nil || !strings.Contains(err.Error(), "the rivet client was closed (Client.Close) during the call, which may have run") {
		t.Errorf("a call cut off by Close: %v (outcome unknown %v), want Canceled, saying the client was closed and that it may have run", err, rivet.OutcomeUnknown(err))
	}
}

// proxy forwards TCP connections to target until broken, which closes
// every connection it holds.
type proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); p.breakAll(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) breakAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A call routed straight to the owner whose connection breaks mid-call
// says that it may have run, as one whose connection to the node that
// forwards it does (it only named the node), and stays of an unknown
// outcome: not retried.
func TestADirectCallWhoseConnectionBreaksSaysItMayHaveRun(t *testing.T) {
	var calls atomic.Int64
	entered := make(chan struct{}, 1)
	a := servertest.NewFake()
	a.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action != "block" {
			return json.RawMessage(`"a"`), nil
		}
		calls.Add(1)
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	p := startProxy(t, servertest.Start(t, a, servertest.Config{}))
	var atB atomic.Int64
	b := countingFake("b", &atB)
	b.MemberList = []runtime.Member{{NodeID: "a", GRPCAddr: p.l.Addr().String(), State: "alive"}}
	b.PartitionCount = 1
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}
	c := newClient(t, servertest.Start(t, b, servertest.Config{}), client.WithDirectRouting(time.Hour))
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	callsReach(cctx, t, c, `"a"`)

	done := make(chan error, 1)
	go func() {
		_, err := c.Actor("counter", "k").Call(cctx, "block")
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not reach the owner")
	}
	p.breakAll()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits after its connection broke")
	}
	var re *rivet.Error
	if !errors.As(err, &re) || !errors.Is(err, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(err) || errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: outcome unknown %v, want an UNAVAILABLE of unknown outcome", err, rivet.OutcomeUnknown(err))
	}
	for _, want := range []string{"the call to node a (" + p.l.Addr().String() + "), the actor's owner, failed after it was sent, and may have run (its outcome is unknown): "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the call ran %d times, want once (not retried)", n)
	}
}
