// Package auth is the bearer token of a node's gRPC port, both ends of it:
// Credentials puts the token on every call a client, rivetctl or a node
// forwarding to a peer makes, and Check is how a node verifies what
// arrived. It knows nothing of status codes; the server turns its errors
// into UNAUTHENTICATED.
package auth
