package examples_test

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
)

// A node hosting the examples must not start with a setting it would
// ignore: "5" (no unit) once left the auction's 24 h in force.
func TestRegistryRefusesAnAuctionTimeoutThatDoesNotParse(t *testing.T) {
	for _, v := range []string{"5", "soon", "-1s", "0s"} {
		t.Setenv(seed.AuctionTimeoutEnv, v)
		_, err := examples.Registry()
		if err == nil || !strings.Contains(err.Error(), seed.AuctionTimeoutEnv) {
			t.Errorf("%s=%q: err = %v, want one naming the variable", seed.AuctionTimeoutEnv, v, err)
		}
	}
	for _, v := range []string{"", "5s", "1m30s"} {
		t.Setenv(seed.AuctionTimeoutEnv, v)
		if _, err := examples.Registry(); err != nil {
			t.Errorf("%s=%q: %v", seed.AuctionTimeoutEnv, v, err)
		}
	}
}

// Nor with an API URL every call would fail on: without its scheme, the
// examples' steps each failed with a URL parse error once a workflow ran.
func TestRegistryRefusesAnAPIURLThatIsNotOne(t *testing.T) {
	for _, v := range []string{"127.0.0.1:6480", "localhost", "ftp://host/", "http://", "http//127.0.0.1:6480"} {
		t.Setenv(exampleapi.EnvVar, v)
		_, err := examples.Registry()
		if err == nil || !strings.Contains(err.Error(), exampleapi.EnvVar) {
			t.Errorf("%s=%q: err = %v, want one naming the variable", exampleapi.EnvVar, v, err)
		}
	}
	for _, v := range []string{"", "http://127.0.0.1:6480", "https://api.example.com/v1/", "http://host.docker.internal:6480"} {
		t.Setenv(exampleapi.EnvVar, v)
		if _, err := examples.Registry(); err != nil {
			t.Errorf("%s=%q: %v", exampleapi.EnvVar, v, err)
		}
	}
}
