package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServesTheCountsAndAcceptsPosts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--count", "/users=4"}, io.Discard, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("not listening after 30 s")
	}
	resp, err := http.Get(base + "/users")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Count int }
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || body.Count != 4 {
		t.Fatalf("GET /users = %+v, %v; want count 4", body, err)
	}
	// --count changes the path it names; the others keep their defaults
	// (they answered 0, and the dashboard summed the wrong figures).
	resp, err = http.Get(base + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	body.Count = 0
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || body.Count != 5 {
		t.Fatalf("GET /orders with --count /users=4 = %+v, %v; want the default, 5", body, err)
	}
	resp, err = http.Post(base+"/auctions/a1", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST = %d, want 200", resp.StatusCode)
	}
}

func TestRefusesAMalformedCount(t *testing.T) {
	if err := run(context.Background(), []string{"--count", "users"}, io.Discard, nil); err == nil {
		t.Fatal("a count without /path=n was accepted")
	}
}

// An argument that is not a flag is refused: it stopped the parsing, and the
// flags after it were ignored (the stand-in then served the default counts,
// on the default address, where one may already listen).
func TestRefusesAnArgumentThatIsNotAFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{{"127.0.0.1:0"}, {"--addr", "127.0.0.1:0", "/users=4", "--count", "/orders=1"}} {
		if err := run(ctx, args, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Fatalf("%q: %v, want refused as an unexpected argument", args, err)
		}
	}
}
