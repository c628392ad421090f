package main

import (
	"strings"
	"testing"
)

// A malformed RIVET_* value stops the node with a message naming it, before
// anything starts.
func TestMalformedEnvironmentIsRefused(t *testing.T) {
	t.Setenv("RIVET_LEASE_TTL", "five seconds")
	t.Setenv("RIVET_PARTITIONS", "-3")
	envErrs = nil
	err := run([]string{"--data-dir", t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "RIVET_LEASE_TTL") || !strings.Contains(err.Error(), "RIVET_PARTITIONS") {
		t.Fatalf("run = %v, want an error naming both variables", err)
	}
}

func TestUnknownFlagIsRefused(t *testing.T) {
	envErrs = nil
	if err := run([]string{"--no-such-flag"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}
