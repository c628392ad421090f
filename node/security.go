package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/server"
)

// security is what the node's Config asks of its connections, loaded from
// the files once, at Start.
type security struct {
	// server secures the gRPC server: TLS (mTLS) and the token check,
	// which must come before the forwarding interceptor so that nothing
	// is forwarded for an unauthenticated caller.
	server []grpc.ServerOption
	// peer secures the node's connections to other nodes: TLS with the
	// node's own certificate as client certificate, and the token.
	peer []grpc.DialOption
	// etcd is the client TLS of an external etcd; nil for plaintext.
	etcd *tls.Config
}

// validateSecurity refuses settings that would run with less security than
// they seem to ask for.
func (c *Config) validateSecurity() error {
	if c.Token != "" && strings.TrimSpace(c.Token) == "" {
		// Trimmed, it would be no token at all: every call let through,
		// on a node that was asked to require one.
		return errors.New("node: Token (--token, RIVET_TOKEN) is only white space")
	}
	c.Token = strings.TrimSpace(c.Token)
	for _, r := range c.Token {
		// It travels in gRPC metadata, which carries printable ASCII.
		if r < 0x20 || r > 0x7e {
			return errors.New("node: Token (--token, RIVET_TOKEN) must be printable ASCII")
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("node: TLSCertFile and TLSKeyFile (--tls-cert, --tls-key) go together")
	}
	if c.TLSCertFile == "" && (c.TLSClientCAFile != "" || c.TLSCAFile != "") {
		// mTLS or a peer CA without TLS would be ignored: refuse rather
		// than serve plaintext to someone who asked for certificates.
		return errors.New("node: TLSClientCAFile and TLSCAFile (--tls-client-ca, --tls-ca) need TLS on (TLSCertFile and TLSKeyFile: --tls-cert, --tls-key)")
	}
	etcdTLS := c.EtcdCAFile != "" || c.EtcdCertFile != "" || c.EtcdKeyFile != ""
	if !etcdTLS {
		return nil
	}
	if len(c.EtcdEndpoints) == 0 {
		return errors.New("node: etcd TLS settings (--etcd-ca, --etcd-cert, --etcd-key) are for an external etcd (EtcdEndpoints: --etcd-endpoints); the embedded etcd serves plaintext")
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		return errors.New("node: EtcdCertFile and EtcdKeyFile (--etcd-cert, --etcd-key) go together")
	}
	for _, ep := range c.EtcdEndpoints {
		// etcd's client dials an http:// endpoint in plaintext even with
		// a TLS configuration.
		if len(ep) >= 7 && strings.EqualFold(ep[:7], "http://") { // etcd's client lowercases the scheme
			return fmt.Errorf("node: etcd endpoint %s: with etcd TLS, endpoints must be https:// (http:// is dialed in plaintext)", ep)
		}
	}
	return nil
}

// loadSecurity reads the certificates and builds the credentials of the
// node's connections.
func (n *Node) loadSecurity() (security, error) {
	c := n.cfg
	var s security
	peerCreds := insecure.NewCredentials()
	if c.TLSCertFile != "" {
		st, err := certs.ServerConfig(c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile)
		if err != nil {
			return s, fmt.Errorf("node: gRPC TLS: %w", err)
		}
		ca := c.TLSCAFile
		if ca == "" {
			ca = c.TLSClientCAFile
		}
		pt, err := certs.ClientConfig(ca, c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return s, fmt.Errorf("node: peer TLS: %w", err)
		}
		s.server = append(s.server, grpc.Creds(credentials.NewTLS(st)))
		peerCreds = credentials.NewTLS(pt)
	}
	s.peer = append(s.peer, grpc.WithTransportCredentials(peerCreds))
	readOpts := []server.AuthOption{server.OnRequestReadTimeout(n.requestReadTimedOut), server.RequestReadTimeout(c.requestReadTimeout)}
	if c.Token != "" {
		// Checked from a call's headers, before its request is read.
		s.server = append(s.server, server.AuthServerOptions(c.Token, readOpts...)...)
		s.peer = append(s.peer, grpc.WithPerRPCCredentials(auth.NewCredentials(c.Token)))
		if c.TLSCertFile == "" {
			n.log.Warn("the gRPC port requires a token but has no TLS: tokens cross the network in plaintext")
		}
	} else {
		// Without a token, only the bound on how long a request may take
		// to arrive.
		s.server = append(s.server, server.AuthServerOptions("", readOpts...)...)
	}
	if c.EtcdCAFile != "" || c.EtcdCertFile != "" {
		et, err := certs.ClientConfig(c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile)
		if err != nil {
			return s, fmt.Errorf("node: etcd TLS: %w", err)
		}
		s.etcd = et
	}
	n.log.Info("gRPC port security", zap.Bool("tls", c.TLSCertFile != ""), zap.Bool("mtls", c.TLSClientCAFile != ""),
		zap.Bool("token", c.Token != ""), zap.Bool("etcd_tls", s.etcd != nil))
	return s, nil
}
