package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/internal/certs"
)

func generate(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := certs.Generate(dir, []string{"node1", " node2", "localhost", "127.0.0.1"}, 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

func parse(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The node certificate verifies for the hosts it was made for, as a server
// and as a client; the client certificate only as a client.
func TestGeneratedCertificatesVerify(t *testing.T) {
	dir := generate(t)
	pool, err := certs.Pool(filepath.Join(dir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	node := parse(t, filepath.Join(dir, certs.NodeFile))
	for _, host := range []string{"node1", "node2", "localhost", "127.0.0.1"} {
		if _, err := node.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("node certificate for %s: %v", host, err)
		}
	}
	if _, err := node.Verify(x509.VerifyOptions{DNSName: "node3", Roots: pool}); err == nil {
		t.Error("node certificate verified for a host it was not made for")
	}
	asClient := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := node.Verify(asClient); err != nil {
		t.Errorf("node certificate as a client: %v", err)
	}
	cl := parse(t, filepath.Join(dir, certs.ClientFile))
	if _, err := cl.Verify(asClient); err != nil {
		t.Errorf("client certificate as a client: %v", err)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Error("client certificate verified as a server certificate")
	}
	for _, f := range []string{certs.CAKeyFile, certs.NodeKeyFile, certs.ClientKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}

// Generate does not overwrite a CA: certificates it signed would stop
// verifying.
func TestGenerateRefusesToOverwrite(t *testing.T) {
	dir := generate(t)
	before, _ := os.ReadFile(filepath.Join(dir, certs.CAKeyFile))
	err := certs.Generate(dir, []string{"localhost"}, 0)
	if !errors.Is(err, certs.ErrExists) {
		t.Fatalf("second Generate: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, certs.CAKeyFile))
	if string(before) != string(after) {
		t.Fatal("the CA key changed")
	}
	if err := certs.Generate(t.TempDir(), nil, 0); err == nil {
		t.Fatal("Generate without hosts succeeded")
	}
}

// Generate writes no certificates already expired, or about to be on a
// node whose clock is ahead.
func TestGenerateRefusesAValidityTooShort(t *testing.T) {
	dir := t.TempDir()
	if err := certs.Generate(dir, []string{"localhost"}, time.Nanosecond); err == nil {
		t.Fatal("Generate with a validity of 1ns succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("wrote %d files", len(entries))
	}
}

// handshake runs one TLS handshake between ServerConfig and ClientConfig
// over loopback and returns the client's error (which includes the
// server's refusal: under TLS 1.3 it arrives with the first read).
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if err := c.(*tls.Conn).Handshake(); err == nil {
			_, _ = c.Write([]byte("ok"))
		}
	}()
	defer func() { <-done }()
	c, err := tls.Dial("tcp", lis.Addr().String(), cli)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.ReadFull(c, make([]byte, 2))
	return err
}

func TestMutualTLS(t *testing.T) {
	dir := generate(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	srv, err := certs.ServerConfig(f(certs.NodeFile), f(certs.NodeKeyFile), f(certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		ca, cert, key    string
		wantErrSubstring string
	}{
		{"client certificate", f(certs.CAFile), f(certs.ClientFile), f(certs.ClientKeyFile), ""},
		{"node certificate as a client", f(certs.CAFile), f(certs.NodeFile), f(certs.NodeKeyFile), ""},
		{"no client certificate", f(certs.CAFile), "", "", "certificate required"},
		{"system roots", "", f(certs.ClientFile), f(certs.ClientKeyFile), "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, err := certs.ClientConfig(tc.ca, tc.cert, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			cli.ServerName = "127.0.0.1"
			err = handshake(t, srv, cli)
			switch {
			case tc.wantErrSubstring == "" && err != nil:
				t.Fatalf("handshake: %v", err)
			case tc.wantErrSubstring != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrSubstring)):
				t.Fatalf("handshake: %v, want an error with %q", err, tc.wantErrSubstring)
			}
		})
	}
	if _, err := certs.ClientConfig(f(certs.CAFile), f(certs.ClientFile), ""); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := certs.Pool(f(certs.ClientKeyFile)); err == nil {
		t.Error("a key file was accepted as a CA file")
	}
}
