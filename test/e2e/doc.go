// Package e2e holds end-to-end tests that run real node processes (built
// from cmd/node and cmd/rivetctl) on loopback, kill them with SIGKILL and
// restart them, and check what a user relies on: nothing acknowledged is
// lost, bad input is refused with the right code.
package e2e
