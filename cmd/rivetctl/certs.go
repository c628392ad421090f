package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/internal/certs"
)

// certsCommand writes a CA and the node and client certificates it signs,
// so that a cluster can run with mTLS without openssl.
func (a *app) certsCommand() *cobra.Command {
	var (
		out      string
		hosts    string
		validity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Write a CA, a node certificate (for --hosts) and a client certificate into --out",
		Long: `certs writes a new CA and two certificates it signs (ECDSA P-256) into --out:

  ca.pem, ca-key.pem          the CA (nodes and clients trust ca.pem; ca-key.pem only signs)
  node.pem, node-key.pem      for every node: server and client use, valid for --hosts
  client.pem, client-key.pem  for clients (rivetctl, applications) under mTLS

--hosts must name every host name and IP address nodes are dialed at: the
hosts of their advertised gRPC addresses, and what clients dial. It never
overwrites a file; remove the old ones to make new ones.`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var hs []string
			for _, h := range strings.Split(hosts, ",") {
				if h = strings.TrimSpace(h); h != "" {
					if err := certHost(h); err != nil {
						return err
					}
					hs = append(hs, h)
				}
			}
			if len(hs) == 0 {
				return usagef("--hosts names no host")
			}
			if validity <= 0 {
				return usagef("--validity must be positive, not %s", validity)
			}
			if validity < certs.MinValidity {
				// Refused, as step-ca refuses a duration under its
				// minimum: the files would be expired, or soon, on a
				// node whose clock is ahead, and nothing said so.
				return usagef("--validity %s is too short: the minimum is %s, the clock skew the certificates allow for (a shorter one can be expired before a node loads it); such as 720h for 30 days", validity, certs.MinValidity)
			}
			if err := certs.Generate(out, hs, validity); err != nil {
				return &runError{err: err}
			}
			if a.output == "json" {
				return a.printValue(map[string]any{
					"dir": out, "hosts": hs,
					"files": []string{certs.CAFile, certs.CAKeyFile, certs.NodeFile, certs.NodeKeyFile, certs.ClientFile, certs.ClientKeyFile},
				})
			}
			_, err := fmt.Fprintf(a.stdout, "wrote %s, %s, %s and %s (for %s), %s and %s\n", filepath.Join(out, certs.CAFile),
				certs.CAKeyFile, certs.NodeFile, certs.NodeKeyFile, strings.Join(hs, ","), certs.ClientFile, certs.ClientKeyFile)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "certs", "directory to write into (made if missing)")
	f.StringVar(&hosts, "hosts", "localhost,127.0.0.1", "comma-separated host names and IP addresses of the node certificate")
	f.DurationVar(&validity, "validity", certs.DefaultValidity, "how long the certificates are valid (at least 1h)")
	return cmd
}

// certHost refuses a --hosts entry that is neither an IP address nor a
// host name: it went into the certificate as a DNS name no dial matches
// (node1:6420, 10.0.0.256), and TLS failed only when nodes dialed, with
// "certificate is valid for node1:6420, not node1".
func certHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if strings.Contains(h, "://") {
		return usagef("--hosts: %q is a URL: name its host alone", h)
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		return usagef("--hosts: %q has a port: name hosts without one (%s)", h, host)
	}
	name := strings.TrimPrefix(h, "*.") // a wildcard, as TLS matches it
	for _, label := range strings.Split(name, ".") {
		if label == "" || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return usagef("--hosts: %q is neither an IP address nor a host name (letters, digits, '-' and '_', in labels between dots)", h)
		}
	}
	if strings.Trim(strings.ReplaceAll(name, ".", ""), "0123456789") == "" {
		return usagef("--hosts: %q is not an IP address (nor a host name: a name is not all digits)", h)
	}
	return nil
}
