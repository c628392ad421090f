package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/session"
	"github.com/rivet-go/rivet/node/nodetest"
)

func TestMain(m *testing.M) { nodetest.VerifyNoLeaks(m) }

// startNode starts a real node on dir with the session actor and returns a
// client of it and the node's stop.
func startNode(t *testing.T, dir string) (*client.Client, func()) {
	t.Helper()
	return nodetest.Start(t, dir, session.Actor)
}

func stateOf(t *testing.T, c *client.Client, key string) session.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.Actor("sessionActor", key).Call(ctx, "getState")
	if err != nil {
		t.Fatal(err)
	}
	var s session.State
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitState(t *testing.T, c *client.Client, key string, within time.Duration, ok func(session.State) bool) session.State {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := stateOf(t, c, key)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: state %+v not reached within %v", key, s, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Each touch replaces the pending expiry; the session expires once, its
// ttl after the last touch.
func TestASessionExpiresItsTTLAfterTheLastTouch(t *testing.T) {
	c, _ := startNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := c.Actor("sessionActor", "s1")
	var last time.Time
	for range 3 {
		last = time.Now()
		if _, err := h.Call(ctx, "touch", 2000); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := h.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Schedules) != 1 || ins.Schedules[0].Action != "expire" || string(ins.Schedules[0].Args) != "[]" {
		t.Fatalf("after three touches, scheduled: %+v (want the one expire)", ins.Schedules)
	}
	s := waitState(t, c, "s1", 20*time.Second, func(s session.State) bool { return !s.Active })
	if since := time.Since(last); since < 1999*time.Millisecond { // times are stored to the millisecond
		t.Fatalf("expired %v after the last touch, before its ttl", since)
	}
	if s.Expired != 1 || s.Touches != 3 || s.ExpiredAt < s.ExpiresAt {
		t.Fatalf("state %+v: want 3 touches and 1 expiry, not before its time", s)
	}
	if ins, err := h.Inspect(ctx); err != nil || len(ins.Schedules) != 0 {
		t.Fatalf("after the expiry, scheduled: %+v %v", ins.Schedules, err)
	}
	if _, err := h.Call(ctx, "touch", 0); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("touch 0: %v, want invalid argument", err)
	}
}

// The expiry is stored: a session touched before its node stopped expires
// after the node starts again.
func TestASessionExpiresAfterItsNodeRestarts(t *testing.T) {
	dir := t.TempDir()
	c, stop := startNode(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Actor("sessionActor", "s2").Call(ctx, "touch", 3000); err != nil {
		t.Fatal(err)
	}
	stop()
	restarted := time.Now()
	c, _ = startNode(t, dir)
	s := waitState(t, c, "s2", 20*time.Second, func(s session.State) bool { return !s.Active })
	if s.Expired != 1 || s.ExpiredAt < restarted.UnixMilli() {
		t.Fatalf("state %+v: want 1 expiry, after the restart at %d", s, restarted.UnixMilli())
	}
}

// An operator's cancel (rivetctl schedule cancel) removes the expiry: the
// session stays active.
func TestAnOperatorCancelsASessionsExpiry(t *testing.T) {
	c, _ := startNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := c.Actor("sessionActor", "s3")
	if _, err := h.Call(ctx, "touch", 2000); err != nil {
		t.Fatal(err)
	}
	ins, err := h.Inspect(ctx)
	if err != nil || len(ins.Schedules) != 1 {
		t.Fatalf("inspect: %+v %v", ins.Schedules, err)
	}
	if ok, err := h.CancelScheduledCall(ctx, ins.Schedules[0].ID); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	time.Sleep(2300 * time.Millisecond) // past the expiry's time (absence: cannot flake)
	if s := stateOf(t, c, "s3"); !s.Active || s.Expired != 0 {
		t.Fatalf("state %+v after the expiry was cancelled", s)
	}
}
