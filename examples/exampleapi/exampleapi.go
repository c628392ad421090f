// Package exampleapi is the external HTTP service the seed's examples call
// (fetchCount, listItem, finalizeAuction). Its base URL comes from the
// environment variable EXAMPLES_API_URL; GET answers JSON {"count": n}, POST
// any 2xx. Tests serve it with NewTestServer.
//
// The calls do what the seed's fetch calls do: no timeout of their own
// (the step's, 30 s by default, cancels them through its context), a GET
// that is not 2xx fails, a POST's status is not looked at (fetch fails only
// when the request does), and a count is a JSON number, fractions included
// (TypeScript's number).
package exampleapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// EnvVar names the environment variable holding the base URL.
const EnvVar = "EXAMPLES_API_URL"

var httpClient = &http.Client{}

// CheckEnv refuses an EnvVar that is set but is not an http or https URL
// with a host, so that a node does not start with a base URL every call
// would fail on ("127.0.0.1:6480", without its scheme, fails each step with
// a URL parse error only once a workflow runs). Unset is allowed: the
// examples that call the API then fail, visibly, until it is set.
func CheckEnv() error {
	v := os.Getenv(EnvVar)
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s=%q: want an http:// or https:// URL with a host, such as http://127.0.0.1:6480", EnvVar, v)
	}
	return nil
}

func baseURL() (string, error) {
	u := strings.TrimRight(os.Getenv(EnvVar), "/")
	if u == "" {
		return "", fmt.Errorf("%s is not set: the example has no API to call", EnvVar)
	}
	return u, nil
}

// FetchCount is the seed's fetchCount: GET <base><path>, {"count": n}.
func FetchCount(ctx context.Context, path string) (float64, error) {
	base, err := baseURL()
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("fetch %s failed: %d", path, resp.StatusCode)
	}
	var body struct {
		Count float64 `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("fetch %s: %w", path, err)
	}
	return body.Count, nil
}

// Post is the seed's POST calls: POST <base><path> with a JSON body.
func Post(ctx context.Context, path string, body any) error {
	base, err := baseURL()
	if err != nil {
		return err
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		// What fetch sends with a string body.
		req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
