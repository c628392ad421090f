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
	err := run([]string{"--data-dir", t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "RIVET_LEASE_TTL") || !strings.Contains(err.Error(), "RIVET_PARTITIONS") {
		t.Fatalf("run = %v, want an error naming both variables", err)
	}
}

func TestUnknownFlagIsRefused(t *testing.T) {
	if err := run([]string{"--no-such-flag"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}

// TLS settings that would leave the port less secure than they ask, values
// the node cannot run with, or certificates that cannot be read, stop the
// node before it serves.
func TestSecurityFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Each error names the flags (the node's user has no Config
		// fields to go by).
		{[]string{"--tls-client-ca", "ca.pem"}, "(--tls-client-ca, --tls-ca) need TLS on (TLSCertFile and TLSKeyFile: --tls-cert, --tls-key)"},
		{[]string{"--tls-cert", "node.pem"}, "(--tls-cert, --tls-key) go together"},
		{[]string{"--tls-cert", "missing.pem", "--tls-key", "missing-key.pem"}, "missing.pem"},
		{[]string{"--etcd-ca", "ca.pem"}, "(--etcd-ca, --etcd-cert, --etcd-key) are for an external etcd (EtcdEndpoints: --etcd-endpoints)"},
		{[]string{"--etcd-cert", "c.pem", "--etcd-endpoints", "https://127.0.0.1:2379"}, "(--etcd-cert, --etcd-key) go together"},
		{[]string{"--token", "caf\u00e9"}, "(--token, RIVET_TOKEN) must be printable ASCII"},
		{[]string{"--lease-ttl", "500ms"}, "(--lease-ttl) under 1s"},
		{[]string{"--partitions", "70000"}, "(--partitions) above 65536"},
		{[]string{"--etcd-ca", "ca.pem", "--etcd-endpoints", "http://127.0.0.1:2379"}, "https://"},
	} {
		err := run(append([]string{"--data-dir", t.TempDir(), "--log-level", "error"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
