package main

import (
	"bytes"
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
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--count", "/users=4"}, io.Discard, io.Discard, ready)
	}()
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
	// A path without a count is 404, saying so: {"count": 0} looked like
	// an answer (a mistyped path in EXAMPLES_API_URL summed zeros).
	resp, err = http.Get(base + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusNotFound || string(msg) != "no count for /nope: GET serves /invoices, /orders, /revenue, /users\n" {
		t.Fatalf("GET /nope = %d %q, %v; want 404 naming the paths served", resp.StatusCode, msg, err)
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
	if err := run(context.Background(), []string{"--count", "users"}, io.Discard, io.Discard, nil); err == nil {
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
		if err := run(ctx, args, io.Discard, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Fatalf("%q: %v, want refused as an unexpected argument", args, err)
		}
	}
}

// A flag that does not parse is written once, above the usage, as the
// flag package writes it: main wrote it again after the usage. An error of
// its own (an argument that is no flag) is written once, prefixed.
func TestAnErrorIsWrittenOnce(t *testing.T) {
	for _, args := range [][]string{{"--count", "users=3"}, {"--nope"}} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, io.Discard, &stderr, nil)
		if err == nil {
			t.Fatalf("%v: accepted", args)
		}
		report(&stderr, err)
		out := stderr.String()
		first, rest, _ := strings.Cut(out, "\n")
		if !strings.HasPrefix(rest, "Usage of examples-api:") || strings.Count(out, err.Error()) != 1 || !strings.Contains(first, err.Error()) {
			t.Errorf("%v: stderr:\n%s\nwant the error once, then the usage", args, out)
		}
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"127.0.0.1:7000"}, io.Discard, &stderr, nil)
	report(&stderr, err)
	if out := stderr.String(); !strings.HasPrefix(out, `examples-api: unexpected argument "127.0.0.1:7000"`) || strings.Count(out, "\n") != 1 {
		t.Errorf("a stray argument: stderr %q, want one line", out)
	}
}

// A stand-in served on every address (for docker compose's nodes) prints
// settings a node can use: [::] is no address to dial.
func TestTheHintForEveryAddressNamesOnesToDial(t *testing.T) {
	for url, want := range map[string][]string{
		"http://127.0.0.1:6480": {"EXAMPLES_API_URL=http://127.0.0.1:6480"},
		"http://[::]:6480":      {"EXAMPLES_API_URL=http://127.0.0.1:6480 ", "http://host.docker.internal:6480)"},
		"http://0.0.0.0:7000":   {"EXAMPLES_API_URL=http://127.0.0.1:7000 ", "http://host.docker.internal:7000)"},
	} {
		got := nodeHint(url)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("nodeHint(%q) = %q, want it to hold %q", url, got, w)
			}
		}
	}
}
