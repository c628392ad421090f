package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// create --idempotency-key carries the key; the same create again says it
// was a duplicate (-o json's "duplicate"), another input is refused, and a
// create without the key still finds the actor existing.
func TestCreateWithAnIdempotencyKey(t *testing.T) {
	f := servertest.NewFake()
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "create", "counter", "main", "--input", `{"start":1}`, "--idempotency-key", "c1").
		want(t, 0, "created counter main (partition 12, owner node-1)\n")
	rivetctl(t, addr, "create", "counter", "main", "--input", `{"start":1}`, "--idempotency-key", "c1").
		want(t, 0, "duplicate: counter main was created before with this idempotency key and input (by an earlier create, or by this one's first attempt if a broken connection cut it off and the client sent it again); nothing more was created (partition 12, owner node-1)\n")
	rivetctl(t, addr, "-o", "json", "create", "counter", "main", "--input", `{"start":1}`, "--idempotency-key", "c1").
		want(t, 0, `{"name":"counter","key":["main"],"created_at":"2026-01-02T03:04:05Z","partition":12,"owner":"node-1","duplicate":true}`+"\n")
	rivetctl(t, addr, "create", "counter", "main", "--input", `{"start":2}`, "--idempotency-key", "c1").
		wantErrPrefix(t, 1, "rivetctl: invalid argument: actor counter [\"main\"] was created with idempotency key \"c1\" and another input")
	rivetctl(t, addr, "create", "counter", "main", "--input", `{"start":1}`).
		wantErrPrefix(t, 1, "rivetctl: already exists: ")
}

// brokenCreates is a node whose Creates break as a forwarded call whose
// owner died does: their outcome is unknown.
type brokenCreates struct{ *servertest.Fake }

func (brokenCreates) CreateWith(context.Context, runtime.Ref, json.RawMessage, runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	return runtime.ActorInfo{}, false, &rivet.Error{Kind: rivet.ErrUnavailable, Message: "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"}
}

// A create of unknown outcome says what running it again does: without a
// key it cannot tell its own actor from another's; with one it can. (The
// client retries a keyed one until the deadline, whose error may end it.)
func TestACreateThatMayHaveRunSaysSo(t *testing.T) {
	addr := servertest.Start(t, brokenCreates{servertest.NewFake()}, servertest.Config{})
	rivetctl(t, addr, "create", "counter", "main").
		wantErr(t, 1, "rivetctl: unavailable: the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call (UNAVAILABLE)"+
			"; it may have created the actor all the same: ALREADY_EXISTS if it is run again would not tell this create's actor from another's (--idempotency-key would)")
	r := rivetctl(t, addr, "--timeout", "300ms", "create", "counter", "main", "--idempotency-key", "c1")
	if r.code != 1 || !strings.HasSuffix(r.stderr, "; it may have created the actor all the same: run it again with the same --idempotency-key and --input, which says duplicate if it did\n") {
		t.Errorf("keyed create of unknown outcome: exit %d, stderr %q", r.code, r.stderr)
	}
}

// keylessCreates is a node older than create's idempotency key, which it
// ignores.
type keylessCreates struct{ *servertest.Fake }

func (n keylessCreates) CreateWith(ctx context.Context, ref runtime.Ref, input json.RawMessage, _ runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	return n.Fake.CreateWith(ctx, ref, input, runtime.CreateOptions{})
}

// A keyed create the client sent again after its connection broke, which
// a node that ignores the key answers ALREADY_EXISTS, says the actor may be
// its own (running it again would not tell); answered at once, it does not.
func TestAKeyedCreateRetriedAgainstAnOlderNodeSaysItMayHaveRun(t *testing.T) {
	var breakNext atomic.Bool
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if breakNext.Swap(false) {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	})
	addr := servertest.Start(t, keylessCreates{servertest.NewFake()}, servertest.Config{GRPCOptions: []grpc.ServerOption{broken}})
	breakNext.Store(true)
	rivetctl(t, addr, "create", "counter", "main", "--idempotency-key", "c1").
		wantErr(t, 1, `rivetctl: already exists: actor counter ["main"] already exists (ALREADY_EXISTS actor.duplicate_key)`+
			"; an earlier attempt, whose connection broke, may have created the actor all the same: a node older than --idempotency-key ignores it, so the actor that exists may be this create's (look: rivetctl inspect)")
	rivetctl(t, addr, "create", "counter", "main", "--idempotency-key", "c1").
		wantErr(t, 1, `rivetctl: already exists: actor counter ["main"] already exists (ALREADY_EXISTS actor.duplicate_key)`)
}
