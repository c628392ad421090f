package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// waitRun is what the test learns of one run of waiter's wait, by the
// run's id (its argument): a call whose deadline passed before its action
// began, on a loaded machine, may still begin it later, and its news must
// not pass for the next call's.
type waitRun struct {
	started chan waitStart // one value: the run began
	ended   chan error     // one value: how its context ended
}

// waitStart is how a run of wait found its context as it began.
type waitStart struct {
	deadline time.Time // the node's (zero: none)
	done     bool      // its context had ended already
}

// waitRuns holds the *waitRun of each id a test waits on; waitIDs gives
// the ids, never the same twice in a process (-count too).
var (
	waitRuns sync.Map
	waitIDs  atomic.Int64
)

// newWaitRun registers a run of wait, and returns its id.
func newWaitRun() (int, *waitRun) {
	id := int(waitIDs.Add(1))
	r := &waitRun{started: make(chan waitStart, 1), ended: make(chan error, 1)}
	waitRuns.Store(id, r)
	return id, r
}

// waiter's wait waits on its context, and says when it began and how its
// context ended; ready answers at once.
var waiter = rivet.Actor[errorsState]{
	Name: "waiter",
	Actions: rivet.Actions[errorsState]{
		"wait": rivet.QueryArg(func(c *rivet.ActionCtx[errorsState], id int) (int, error) {
			v, _ := waitRuns.Load(id)
			r, _ := v.(*waitRun)
			if r != nil {
				d, _ := c.Context().Deadline()
				select {
				case r.started <- waitStart{d, c.Context().Err() != nil}:
				default:
				}
			}
			<-c.Context().Done()
			if r != nil {
				select {
				case r.ended <- c.Context().Err():
				default:
				}
			}
			return 0, c.Context().Err()
		}),
		"ready": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) { return 0, nil }),
	},
}

// deadlineSlack is server's: a cancellation that reaches a node more than
// this before the call's deadline as the node has it is a cancel, not
// the deadline (the client's reset at its deadline looks the same).
const deadlineSlack = 50 * time.Millisecond

// An action whose caller's deadline runs out sees it run out
// (context.DeadlineExceeded), called on its node or through another: on
// its node it saw context.Canceled nearly every time (the client's reset
// of the stream at its deadline arrives before the node's own timer
// fires), and its call counted as cancelled, not timed out; through
// another node, now and then (that node's cancel beat the owner's timer).
// A caller that gives up before its deadline still cancels it at once.
//
// On a loaded machine a call's 100 ms can run out before its action
// begins (which then never waits on it), or the node can read the call
// more than deadlineSlack after its caller sent it (its deadline then
// later than the caller's by as much, and the client's reset at the
// deadline is a cancel for it, as a client's early one is): such a run
// tests nothing of the above, and is not counted; the next call has more
// time, in the first case.
func TestAnActionSeesItsCallersDeadlineRunOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(waiter)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/deadline/")
	ref := &rivetv1.ActorRef{Name: "waiter", Key: []string{keysOn(na, "waiter", "w", 1)[0]}}
	raw := func(addr string) rivetv1.ActorServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rivetv1.NewActorServiceClient(conn)
	}
	ended := func(r *waitRun) error {
		t.Helper()
		select {
		case err := <-r.ended:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the action did not end within 10 s of its caller")
			return nil
		}
	}
	for _, via := range []struct {
		name string
		c    rivetv1.ActorServiceClient
	}{{"on its node", raw(na.GRPCAddr())}, {"through another node", raw(nb.GRPCAddr())}} {
		// The actor in memory and the connections made: what a call
		// does before its action begins, the first time, is not timed.
		if _, err := via.c.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "ready", Args: []byte("[]"), CreateIfMissing: true}); err != nil {
			t.Fatalf("%s: ready: %v", via.name, err)
		}
		const want, most = 10, 40
		timeout, counted := 100*time.Millisecond, 0
		for i := 0; counted < want && i < most; i++ {
			id, r := newWaitRun()
			cctx, ccancel := context.WithTimeout(ctx, timeout)
			callerDeadline, _ := cctx.Deadline()
			_, err := via.c.Call(cctx, &rivetv1.CallRequest{Actor: ref, Action: "wait", Args: []byte(fmt.Sprintf("[%d]", id)), CreateIfMissing: true})
			ccancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("%s, call %d: %v, want DEADLINE_EXCEEDED", via.name, i, err)
			}
			var began waitStart
			select {
			case began = <-r.started:
			case <-time.After(2 * time.Second):
				began.done = true // not begun: it will find its context ended, if it ever does
			}
			if began.done {
				t.Logf("%s, call %d: its %v ran out before its action began; not counted", via.name, i, timeout)
				timeout = min(2*timeout, 3200*time.Millisecond)
				continue
			}
			got := ended(r)
			if lag := began.deadline.Sub(callerDeadline); lag > deadlineSlack && !errors.Is(got, context.DeadlineExceeded) {
				t.Logf("%s, call %d: the node read it %v after its caller sent it, and its action ended with %v; not counted", via.name, i, lag, got)
				continue
			}
			counted++
			if !errors.Is(got, context.DeadlineExceeded) {
				t.Errorf("%s, call %d: the action's context ended with %v, want its deadline exceeded", via.name, i, got)
			}
		}
		if counted < want/2 {
			t.Errorf("%s: %d calls of %d counted; want %d at least", via.name, counted, most, want/2)
		}
		// Given up well before its deadline, once its action began:
		// cancelled at once.
		id, r := newWaitRun()
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		go func() {
			select {
			case <-r.started:
			case <-cctx.Done():
			}
			ccancel()
		}()
		_, err := via.c.Call(cctx, &rivetv1.CallRequest{Actor: ref, Action: "wait", Args: []byte(fmt.Sprintf("[%d]", id)), CreateIfMissing: true})
		ccancel()
		if status.Code(err) != codes.Canceled {
			t.Errorf("%s, cancelled: %v, want CANCELED", via.name, err)
		}
		if got := ended(r); !errors.Is(got, context.Canceled) {
			t.Errorf("%s, cancelled: the action's context ended with %v, want cancelled before the deadline", via.name, got)
		}
	}
}

// clock's actions say when their context's deadline is, as the node that
// runs them has it.
var clock = rivet.Actor[errorsState]{
	Name: "clock",
	Actions: rivet.Actions[errorsState]{
		"deadline": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int64, error) {
			d, ok := c.Context().Deadline()
			if !ok {
				return 0, nil
			}
			return d.UnixNano(), nil
		}),
		"wait": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) {
			<-c.Context().Done()
			return 0, c.Context().Err()
		}),
	},
}

// A call forwarded to its actor's owner runs there under a deadline no
// earlier than its caller's, and one that runs out of time fails for its
// caller as its deadline (context.DeadlineExceeded) as it does on the
// owner's node: the forwarded request's timeout was cut down to the
// millisecond, the owner's timeout answer reached the client a moment
// before its own deadline, and the error was rivet.ErrTimeout alone in 4
// calls of 40 (a user trial).
func TestAForwardedCallRunsOutOfTimeWithItsCallersDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(clock)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/fwd-deadline/")
	h := dial(t, nb).Actor("clock", keysOn(na, "clock", "c", 1)[0])
	for i := range 20 {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		want, _ := cctx.Deadline()
		got, err := rivet.Call[int64](cctx, h, "deadline")
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
		if got < want.UnixNano() {
			t.Errorf("call %d: the owner's deadline is %v before the caller's", i, time.Duration(want.UnixNano()-got))
		}
	}
	for i := range 20 {
		cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := h.Call(cctx, "wait")
		ccancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rivet.ErrTimeout) {
			t.Errorf("call %d: %v (context.DeadlineExceeded %v, rivet.ErrTimeout %v); want both", i, err, errors.Is(err, context.DeadlineExceeded), errors.Is(err, rivet.ErrTimeout))
		}
	}
}
