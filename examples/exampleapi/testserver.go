package exampleapi

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
)

// TestServer is an in-process stand-in for the examples' API: GET answers
// the count set for its path (0 if none), POST records the call.
type TestServer struct {
	*httptest.Server

	mu     sync.Mutex
	counts map[string]int
	posts  []Request
	gets   map[string]int
	// knownOnly: a GET of a path without a count is 404 (NewServerOn).
	knownOnly bool
}

// Request is one POST the server received.
type Request struct {
	Path string
	Body string
}

// NewTestServer starts a TestServer on loopback; Close it when done.
func NewTestServer(counts map[string]int) *TestServer {
	s := newTestServer(counts)
	s.Start()
	return s
}

// NewTestServerOn starts a TestServer listening on addr (host:port), e.g.
// 0.0.0.0:0 so that containers can reach it through the host's bridge
// address. Close it when done.
func NewTestServerOn(addr string, counts map[string]int) (*TestServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := newTestServer(counts)
	s.Listener.Close()
	s.Listener = l
	s.Start()
	return s, nil
}

// NewServerOn is NewTestServerOn for a server people call (cmd/examples-api):
// a GET of a path without a count is 404, with a short message naming
// the paths it serves, rather than {"count": 0}, which looked like an
// answer.
func NewServerOn(addr string, counts map[string]int) (*TestServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := newTestServer(counts)
	s.knownOnly = true
	s.Listener.Close()
	s.Listener = l
	s.Start()
	return s, nil
}

func newTestServer(counts map[string]int) *TestServer {
	s := &TestServer{counts: map[string]int{}, gets: map[string]int{}}
	for k, v := range counts {
		s.counts[k] = v
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s
}

func (s *TestServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if _, ok := s.counts[r.URL.Path]; s.knownOnly && !ok {
			paths := slices.Sorted(maps.Keys(s.counts))
			http.Error(w, fmt.Sprintf("no count for %s: GET serves %s", r.URL.Path, strings.Join(paths, ", ")), http.StatusNotFound)
			return
		}
		s.gets[r.URL.Path]++
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"count": s.counts[r.URL.Path]})
	case http.MethodPost:
		b, _ := io.ReadAll(r.Body)
		s.posts = append(s.posts, Request{Path: r.URL.Path, Body: string(b)})
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// Posts returns the POSTs received so far.
func (s *TestServer) Posts() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.posts...)
}

// Gets returns how many GETs each path received.
func (s *TestServer) Gets() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.gets {
		out[k] = v
	}
	return out
}
