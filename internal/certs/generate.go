package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files Generate writes into its directory.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	NodeFile      = "node.pem"
	NodeKeyFile   = "node-key.pem"
	ClientFile    = "client.pem"
	ClientKeyFile = "client-key.pem"
)

// DefaultValidity is how long generated certificates are valid.
const DefaultValidity = 365 * 24 * time.Hour

// MinValidity is the shortest validity Generate takes: the clock skew the
// certificates allow for at their start (NotBefore is an hour back). One
// valid for less could be expired, on a node whose clock is that far
// ahead, before any node loaded it: 1ns wrote certificates expired at
// once, without a word. (step-ca refuses durations under its minimum so.)
const MinValidity = time.Hour

// ErrExists is returned by Generate when one of its files is already in
// the directory: a CA key is not something to overwrite by accident (every
// certificate it signed would stop verifying against the new CA).
var ErrExists = errors.New("certs: file exists")

// Generate writes a new CA and two certificates it signs into dir (made if
// missing):
//
//   - ca.pem, ca-key.pem: the CA. Nodes verify clients and each other with
//     ca.pem; keep ca-key.pem away from the nodes, it only signs.
//   - node.pem, node-key.pem: a node's certificate, for both server and
//     client use (a node presents it when it dials a peer, so that mTLS
//     works between nodes), valid for hosts: host names and IP addresses,
//     which must cover every address clients and peers dial (the
//     advertised gRPC addresses).
//   - client.pem, client-key.pem: a certificate for clients (client use
//     only), for rivetctl and applications under mTLS.
//
// Keys are ECDSA P-256; certificates are valid from an hour ago (clock
// skew) for validity (0: DefaultValidity; at least MinValidity). Key files are readable by the
// owner only. Generate writes nothing if any of the files exists
// (ErrExists).
func Generate(dir string, hosts []string, validity time.Duration) error {
	if len(hosts) == 0 {
		return errors.New("certs: no hosts: name every host name or IP address nodes are dialed at")
	}
	if validity <= 0 {
		validity = DefaultValidity
	}
	if validity < MinValidity {
		return fmt.Errorf("certs: a validity of %s is too short: the minimum is %s", validity, MinValidity)
	}
	for _, f := range []string{CAFile, CAKeyFile, NodeFile, NodeKeyFile, ClientFile, ClientKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%w: %s (remove the old files to make new ones)", ErrExists, filepath.Join(dir, f))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("certs: %w", err)
		}
	}
	now := time.Now()
	ca := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "rivet CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// It signs leaf certificates only.
		MaxPathLenZero: true,
	}
	caDER, caKey, err := issue(ca, nil, nil)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}

	node := leaf("rivet node", now, validity, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			node.IPAddresses = append(node.IPAddresses, ip)
		} else {
			node.DNSNames = append(node.DNSNames, h)
		}
	}
	nodeDER, nodeKey, err := issue(node, caCert, caKey)
	if err != nil {
		return err
	}
	clientDER, clientKey, err := issue(leaf("rivet client", now, validity, x509.ExtKeyUsageClientAuth), caCert, caKey)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	for _, f := range []struct {
		name, kind string
		der        []byte
		mode       os.FileMode
	}{
		{CAFile, "CERTIFICATE", caDER, 0o644},
		{CAKeyFile, "PRIVATE KEY", caKey.der, 0o600},
		{NodeFile, "CERTIFICATE", nodeDER, 0o644},
		{NodeKeyFile, "PRIVATE KEY", nodeKey.der, 0o600},
		{ClientFile, "CERTIFICATE", clientDER, 0o644},
		{ClientKeyFile, "PRIVATE KEY", clientKey.der, 0o600},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})
		if err := writeNew(filepath.Join(dir, f.name), b, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func leaf(name string, now time.Time, validity time.Duration, usage ...x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
	}
}

// key is a generated private key with its PKCS #8 encoding.
type key struct {
	*ecdsa.PrivateKey
	der []byte
}

// issue makes a key for tmpl and signs tmpl with parent's key (self-signed
// when parent is nil).
func issue(tmpl, parent *x509.Certificate, parentKey *key) ([]byte, *key, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: key: %w", err)
	}
	// 128 random bits: serials must be unique per CA and unpredictable.
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, nil, fmt.Errorf("certs: serial: %w", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, &key{PrivateKey: k}
	}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: sign %s: %w", tmpl.Subject.CommonName, err)
	}
	return cert, &key{PrivateKey: k, der: der}, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, path)
		}
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}
