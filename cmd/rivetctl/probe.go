package main

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// tlsAnswer is what an address did with a TLS ClientHello (probeTLS).
type tlsAnswer int

const (
	tlsUnknown   tlsAnswer = iota // no connection, or no answer in time
	tlsAnswered                   // a TLS record: a TLS server
	tlsNotServed                  // closed, or answered in another protocol
)

// probeTimeout bounds probeTLS: it runs once a command has failed.
const probeTimeout = 2 * time.Second

// probeTLS tells a port that closes a plaintext gRPC connection at once
// because it serves TLS only (a node with --tls-cert) from one that does
// not serve gRPC at all (a node's gossip port, which closes a connection
// whose first byte is no memberlist message): both close the connection
// before gRPC's server preface, so gRPC's error reads the same. Only the
// first byte of the answer is looked at; nothing is verified or sent
// after the ClientHello.
func probeTLS(addr string) tlsAnswer {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return tlsUnknown
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	fc := &firstByteConn{Conn: conn}
	host, _, _ := net.SplitHostPort(addr)
	err = tls.Client(fc, &tls.Config{ServerName: host, InsecureSkipVerify: true}).Handshake() // #nosec G402 -- reads the answer's first byte only
	switch {
	case fc.read:
		// 22: a handshake record; 21: an alert (a TLS server that
		// refuses the hello still speaks TLS).
		if fc.first == 22 || fc.first == 21 {
			return tlsAnswered
		}
		return tlsNotServed
	case err == nil:
		return tlsAnswered
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return tlsNotServed
	}
	return tlsUnknown
}

// firstByteConn records the first byte read from a connection.
type firstByteConn struct {
	net.Conn
	read  bool
	first byte
}

func (c *firstByteConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.read {
		c.read, c.first = true, p[0]
	}
	return n, err
}
