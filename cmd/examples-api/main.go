// Command examples-api serves a stand-in for the external HTTP API that the
// seed's examples call (dashboardActor, fanInOutActor, auctionActor): GET
// answers {"count": n} for the paths it has counts for (404 for another),
// POST answers 200. Start the node with EXAMPLES_API_URL set to the
// address it prints:
//
//	go run ./cmd/examples-api &
//	EXAMPLES_API_URL=http://127.0.0.1:6480 go run ./cmd/node
//
// For the nodes of docker-compose.yml, serve it where their containers
// reach the host (--addr 0.0.0.0:6480) and start them with
// EXAMPLES_API_URL=http://host.docker.internal:6480.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rivet-go/rivet/examples/exampleapi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	if err != nil {
		report(os.Stderr, err)
		os.Exit(2)
	}
}

// flagError is a command line the flag package refused: it has written
// the error, and the usage after it, already.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

// report writes err once: not a flag's, nor -h's, which the flag package
// wrote with the usage.
func report(stderr io.Writer, err error) {
	var fe *flagError
	if !errors.As(err, &fe) && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "examples-api:", err)
	}
}

// counts is a repeatable path=n flag.
type counts map[string]int

func (c counts) String() string { return fmt.Sprint(map[string]int(c)) }

func (c counts) Set(v string) error {
	path, n, ok := strings.Cut(v, "=")
	count, err := strconv.Atoi(n)
	if !ok || !strings.HasPrefix(path, "/") || err != nil {
		return fmt.Errorf("want /path=n, got %q", v)
	}
	c[path] = count
	return nil
}

// nodeHint is the setting that points a node at the API served at url.
// Served on every address (0.0.0.0, ::), url's host is no address to
// dial: the hint names the loopback one, and host.docker.internal, which
// reaches the host from docker compose's nodes.
func nodeHint(url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		return exampleapi.EnvVar + "=" + url
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsUnspecified() {
		return exampleapi.EnvVar + "=" + url
	}
	port := u.Port()
	return fmt.Sprintf("%s=http://127.0.0.1:%s (from a container of docker-compose.yml: http://host.docker.internal:%s)", exampleapi.EnvVar, port, port)
}

// run serves until ctx ends; ready, if set, gets the base URL once it
// listens. The usage, and a flag that does not parse, go to stderr (a
// *flagError).
func run(ctx context.Context, args []string, out, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("examples-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:6480", "address to listen on")
	// The counts the seed's dashboard and fan-in/fan-out examples fetch,
	// as the tests serve them; --count changes the paths it names and
	// leaves the others as they are.
	c := counts{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11}
	fs.Var(c, "count", "a GET path and the count it answers, as /path=n (repeatable; changes that path only; default /users=3 /orders=5 /revenue=7 /invoices=11)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &flagError{err}
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first argument that is not a
		// flag, and ignored every flag after it.
		return fmt.Errorf("unexpected argument %q (flags only: --addr HOST:PORT, --count /path=n)", fs.Arg(0))
	}
	srv, err := exampleapi.NewServerOn(*addr, c)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(out, "serving the examples' API on %s; start the node with %s\n", srv.URL, nodeHint(srv.URL))
	if ready != nil {
		ready <- srv.URL
	}
	<-ctx.Done()
	return nil
}
