package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// unmarshallable's get returns a result that JSON cannot encode: the call
// fails INTERNAL, an error of the node's own (not the actor's, which the
// host logs as it masks it).
var unmarshallable = rivet.Actor[errorsState]{
	Name: "unmarshallable",
	Actions: rivet.Actions[errorsState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (chan int, error) { return make(chan int), nil }),
	},
}

// An INTERNAL error is logged at error level whichever node the client
// called: a call forwarded to the actor's owner is logged there, as one
// made to the owner directly is. The forwarding node passes the owner's
// status on without logging it again, trusting the owner to have logged
// it; the owner served the forwarded request without the gRPC interceptor
// that logs calls, and so an INTERNAL that nothing on the way had logged
// reached the client with no log line at all on any node.
func TestAnInternalErrorOfAForwardedCallIsLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, key, via := loggedPair(t, ctx, unmarshallable)
	for _, via := range via {
		before := logs.Len()
		_, err := via.c.GetOrCreate("unmarshallable", key).Call(ctx, "get")
		if !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("called through %s: %v, want ErrInternal", via.name, err)
		}
		logged := 0
		for _, e := range logs.All()[before:] {
			if e.Level >= zapcore.ErrorLevel && strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "does not marshal to JSON") {
				logged++
			}
		}
		if logged != 1 {
			t.Errorf("called through %s: the INTERNAL error logged %d times at error level, want once", via.name, logged)
		}
	}
}

// quiet's get answers at once.
var quiet = rivet.Actor[errorsState]{
	Name: "quiet",
	Actions: rivet.Actions[errorsState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) { return 1, nil }),
	},
}

// At debug level each call's "grpc call" line names its actor, key and
// action, on every node it went through: the node the client called, and
// the owner that ran a forwarded one, whose line says it was forwarded
// (else the two lines of one call read as two calls). An operator who turns a node to
// debug to follow one key (docs/deploy.md: lines about one actor carry
// actor and key) found method, code and duration, and nothing to tell
// that key's calls from the others'.
func TestACallsDebugLineNamesItsActorKeyAndAction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, key, via := loggedPairAt(t, ctx, quiet, zapcore.DebugLevel)
	for i, via := range via {
		before := logs.Len()
		if _, err := via.c.GetOrCreate("quiet", key).Call(ctx, "get"); err != nil {
			t.Fatalf("called through %s: %v", via.name, err)
		}
		var named, all, forwarded int
		for _, e := range logs.All()[before:] {
			f := e.ContextMap()
			if e.Message != "grpc call" || f["method"] != rivetv1.ActorService_Call_FullMethodName {
				continue
			}
			all++
			if f["actor"] == "quiet" && fmt.Sprint(f["key"]) == fmt.Sprint([]string{key}) && f["action"] == "get" {
				named++
			}
			if f["forwarded"] == true {
				forwarded++
			}
		}
		// Through another node: its line, and the owner's, which says
		// the call was forwarded to it.
		if want := i + 1; all != want || named != want || forwarded != i {
			t.Errorf("called through %s: %d grpc call lines of the call, %d naming its actor, key and action, %d marked forwarded; want %d, %d and %d", via.name, all, named, forwarded, want, want, i)
		}
	}
}

// failing's boom returns a plain Go error: the caller gets INTERNAL,
// masked, and the node's log has the cause.
var failing = rivet.Actor[errorsState]{
	Name: "failing",
	Actions: rivet.Actions[errorsState]{
		"boom": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) { return 0, errors.New("disk on fire") }),
	},
}

// An action that fails with an error of its own is one failure, and one
// line in the log: at error level, with its cause, on the node that ran
// it, whichever node the client called. (It was two: a warning with the
// cause, then the call's error line without it.)
func TestAnActionsOwnErrorIsOneErrorLineWithItsCause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, key, via := loggedPair(t, ctx, failing)
	for _, via := range via {
		before := logs.Len()
		_, err := via.c.GetOrCreate("failing", key).Call(ctx, "boom")
		if !errors.Is(err, rivet.ErrInternal) || strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("called through %s: %v, want ErrInternal without its cause", via.name, err)
		}
		var lines []string
		for _, e := range logs.All()[before:] {
			if e.Level >= zapcore.WarnLevel {
				lines = append(lines, fmt.Sprintf("%v %q %v", e.Level, e.Message, e.ContextMap()))
			}
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "error ") || !strings.Contains(lines[0], "disk on fire") {
			t.Errorf("called through %s: logged at warn and up:\n%s\nwant one error line with the cause", via.name, strings.Join(lines, "\n"))
		}
	}
}

// panicking's parse panics (an index out of range, as in a user trial).
var panicking = rivet.Actor[errorsState]{
	Name: "panicking",
	Actions: rivet.Actions[errorsState]{
		"parse": rivet.Action(func(c *rivet.ActionCtx[errorsState], s string) (string, error) {
			return strings.SplitN(s, ":", 2)[1], nil
		}),
	},
}

// A panicking action is one failure, and one error line in the log: the
// node's "actor panicked", with the action and the stack, whichever node
// the client called (docs/deploy.md says a request that ends INTERNAL is
// logged at error level once). It was two: the call's own "grpc call"
// line came at error level after it.
func TestAPanickingActionIsOneErrorLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, key, via := loggedPair(t, ctx, panicking)
	for _, via := range via {
		before := logs.Len()
		_, err := via.c.GetOrCreate("panicking", key).Call(ctx, "parse", "nocolon")
		if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("called through %s: %v, want ErrInternal saying it panicked", via.name, err)
		}
		var lines []string
		var panicked []observer.LoggedEntry
		for _, e := range logs.All()[before:] {
			if e.Level >= zapcore.ErrorLevel {
				lines = append(lines, fmt.Sprintf("%q %v", e.Message, e.ContextMap()))
				if e.Message == "actor panicked" {
					panicked = append(panicked, e)
				}
			}
		}
		if len(lines) != 1 || len(panicked) != 1 {
			t.Fatalf("called through %s: logged at error level:\n%s\nwant one line, \"actor panicked\"", via.name, strings.Join(lines, "\n"))
		}
		m := panicked[0].ContextMap()
		if m["actor"] != "panicking" || m["action"] != "parse" || !strings.Contains(fmt.Sprint(m["panic"]), "index out of range") || !strings.Contains(fmt.Sprint(m["stack"]), "forward_log_test.go") {
			t.Errorf("called through %s: \"actor panicked\" with %v; want the actor, the action, the panic and its stack", via.name, m)
		}
	}
}

// loggedPair starts two nodes of actor, logging to one observer (warn and
// up, both nodes' lines), and returns the observed logs, a key of actor
// whose partition the second node owns, and a client through the actor's
// owner and one through the other node, closed when t ends.
func loggedPair[S any](t *testing.T, ctx context.Context, actor rivet.Actor[S]) (*observer.ObservedLogs, string, []namedClient) {
	t.Helper()
	return loggedPairAt(t, ctx, actor, zapcore.WarnLevel)
}

// loggedPairAt is loggedPair with the nodes logging from level on.
func loggedPairAt[S any](t *testing.T, ctx context.Context, actor rivet.Actor[S], level zapcore.Level) (*observer.ObservedLogs, string, []namedClient) {
	t.Helper()
	reg, err := rivet.Setup(actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	core, logs := observer.New(level)
	acfg := clusterConfig(t, "a", endpoints, "/fwdlog/", eventParts, nil)
	acfg.Logger = zap.New(core)
	na := startNode(t, ctx, acfg, reg)
	bcfg := clusterConfig(t, "b", endpoints, "/fwdlog/", eventParts, []string{na.GossipAddr()})
	bcfg.Logger = zap.New(core)
	nb := startNode(t, ctx, bcfg, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	var via []namedClient
	for _, n := range []struct {
		name, addr string
	}{{"its owner", nb.GRPCAddr()}, {"another node", na.GRPCAddr()}} {
		c, err := client.New(n.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		via = append(via, namedClient{n.name, c})
	}
	return logs, keysOn(nb, actor.Name, actor.Name[:1], 1)[0], via
}

// namedClient is a client, and what it calls through.
type namedClient struct {
	name string
	c    *client.Client
}
