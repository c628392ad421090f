package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// TokenEnv names the environment variable clients read the token from
// when they are given none, as the original engine's clients do.
const TokenEnv = "RIVET_TOKEN"

// Header is the metadata key that carries the token, as
// "Bearer <token>" (RFC 6750, as HTTP does).
const Header = "authorization"

const scheme = "bearer "

// Errors of Check.
var (
	ErrNoToken  = errors.New("no bearer token (send metadata authorization: Bearer <token>)")
	ErrBadToken = errors.New("invalid bearer token")
)

// Credentials sends a bearer token with every call. It does not require a
// secure transport: a token sent in plaintext to a node on loopback, or
// on a private network the operator trusts, is the operator's call (TLS is
// recommended everywhere else; a token on the wire in plaintext is a token
// anyone on the path can replay).
type Credentials struct{ value string }

var _ credentials.PerRPCCredentials = Credentials{}

// NewCredentials returns the credentials of token.
func NewCredentials(token string) Credentials { return Credentials{value: "Bearer " + token} }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c Credentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{Header: c.value}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Credentials) RequireTransportSecurity() bool { return false }

// Check returns nil if md carries token as a bearer token, ErrNoToken if it
// carries none, ErrBadToken if a different one. The comparison takes the
// same time whatever the tokens are (both are hashed first, so not even
// the length leaks), so that timing cannot guess the token byte by byte.
func Check(md metadata.MD, token string) error {
	want := sha256.Sum256([]byte(token))
	found := false
	for _, v := range md.Get(Header) {
		if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
			continue
		}
		found = true
		got := sha256.Sum256([]byte(strings.TrimSpace(v[len(scheme):])))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			return nil
		}
	}
	if !found {
		return ErrNoToken
	}
	return ErrBadToken
}
