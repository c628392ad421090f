package exampleapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rivet-go/rivet/examples/exampleapi"
)

// The calls do what the seed's fetch calls do: a count is any JSON number,
// a GET that is not 2xx fails, a POST's status is not looked at (only a
// failed request fails it), and a POST body goes as fetch sends a string.
func TestTheCallsBehaveAsTheSeedsFetch(t *testing.T) {
	type post struct{ path, contentType, body string }
	posts := make(chan post, 4)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/revenue":
			_, _ = io.WriteString(w, `{"count": 1234.5}`)
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusBadGateway)
		default:
			b, _ := io.ReadAll(r.Body)
			posts <- post{r.URL.Path, r.Header.Get("Content-Type"), string(b)}
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer api.Close()
	t.Setenv(exampleapi.EnvVar, api.URL)
	ctx := context.Background()

	if n, err := exampleapi.FetchCount(ctx, "/revenue"); err != nil || n != 1234.5 {
		t.Errorf("FetchCount(/revenue) = %v, %v; want 1234.5", n, err)
	}
	if _, err := exampleapi.FetchCount(ctx, "/users"); err == nil || err.Error() != "fetch /users failed: 502" {
		t.Errorf("FetchCount of a 502: %v, want the seed's error", err)
	}
	if err := exampleapi.Post(ctx, "/auctions/i1", nil); err != nil {
		t.Errorf("POST answered 500: %v, want no error (fetch does not look at the status)", err)
	}
	if err := exampleapi.Post(ctx, "/auctions/i1/finalize", map[string]string{"outcome": "bid"}); err != nil {
		t.Errorf("POST answered 500: %v", err)
	}
	want := []post{{"/auctions/i1", "", ""}, {"/auctions/i1/finalize", "text/plain;charset=UTF-8", `{"outcome":"bid"}`}}
	for _, w := range want {
		if got := <-posts; got != w {
			t.Errorf("POST %+v, want %+v", got, w)
		}
	}

	api.Close()
	if err := exampleapi.Post(ctx, "/auctions/i1", nil); err == nil {
		t.Error("POST to an API that is down: no error")
	}
}
