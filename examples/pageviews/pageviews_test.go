package pageviews_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/pageviews"
	"github.com/rivet-go/rivet/node/nodetest"
)

func TestMain(m *testing.M) { nodetest.VerifyNoLeaks(m) }

// startNode starts a real node on dir with the pageviews actor and returns a
// client of it and the node's stop.
func startNode(t *testing.T, dir string) (*client.Client, func()) {
	t.Helper()
	return nodetest.Start(t, dir, pageviews.Actor)
}

func call(t *testing.T, c *client.Client, key, action string) pageviews.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := rivet.Call[pageviews.View](ctx, c.GetOrCreate("pageViews", key), action)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Views are counted in memory, and a stop (an orderly sleep) makes them
// durable: the next activation has them all.
func TestViewsCountedInMemorySurviveAStop(t *testing.T) {
	pageviews.FlushEvery = time.Hour // only the stop flushes
	dir := t.TempDir()
	c, stop := startNode(t, dir)
	for range 5 {
		call(t, c, "home", "view")
	}
	if v := call(t, c, "home", "getState"); v.Total != 0 || v.Pending != 5 || v.Wakes != 1 {
		t.Fatalf("before the stop: %+v, want 5 views pending, none durable, 1 wake", v)
	}
	stop()
	c, _ = startNode(t, dir)
	if v := call(t, c, "home", "getState"); v.Total != 5 || v.Pending != 0 || v.Wakes != 2 || v.Sleeps != 1 {
		t.Fatalf("after a restart: %+v, want the 5 views durable, 2 wakes, 1 sleep", v)
	}
}

// While the actor is awake, the recurring call OnWake scheduled once
// flushes the views.
func TestViewsAreFlushedWhileAwake(t *testing.T) {
	pageviews.FlushEvery = time.Second
	c, _ := startNode(t, t.TempDir())
	for range 3 {
		call(t, c, "about", "view")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := call(t, c, "about", "getState")
		if v.Total == 3 && v.Pending == 0 {
			if v.Sleeps != 0 || v.Wakes != 1 {
				t.Fatalf("flushed by a sleep, not the schedule: %+v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("views not flushed within 20 s: %+v", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
