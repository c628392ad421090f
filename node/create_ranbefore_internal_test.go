package node

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
)

// A keyed create that a node forwards for an actor, sent again after its
// hop broke off, that the owner answers ALREADY_EXISTS is of unknown
// outcome, as the Go client's is: an owner older than the key ignores it,
// and the actor may be the broken hop's. An ALREADY_EXISTS with no broken
// hop before it is the owner's plain answer.
func TestAKeyedCreateSentAgainAfterABrokenHopIsOfUnknownOutcomeIfItExists(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, a, b := twoNodesWithShortLeases(t, reg, "/create-ranbefore-test/", parts)
	onB := counterOwnedBy(t, a, b)
	exists, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrAlreadyExists, "actor counter exists"))
	broken := status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded create")
	r := remote{a.view}
	for _, c := range []struct {
		what    string
		answers []error
		unknown bool
	}{
		{"a hop that broke off, then ALREADY_EXISTS", []error{broken, exists.Err()}, true},
		{"ALREADY_EXISTS at once", []error{exists.Err()}, false},
	} {
		hops := 0
		_, _, err := r.create(ctx, onB, nil, runtime.CreateOptions{IdempotencyKey: "k"}, func(*server.PeerConn) (*rivetv1.CreateResponse, error) {
			hops++
			if hops > len(c.answers) {
				return nil, errors.New("sent more often than the test answers")
			}
			return nil, c.answers[hops-1]
		})
		if hops != len(c.answers) || !errors.Is(err, rivet.ErrAlreadyExists) || rivet.OutcomeUnknown(err) != c.unknown {
			t.Errorf("%s: %v after %d hops (outcome unknown %v); want ALREADY_EXISTS after %d, outcome unknown %v", c.what, err, hops, rivet.OutcomeUnknown(err), len(c.answers), c.unknown)
		}
	}
}

// A keyed call or send that a node forwards for an actor, sent again after
// its hop broke off, whose owner answers that it waited in vain for the
// actor's turn (a timeout with reason actor.busy: that hop did not run),
// is of unknown outcome: the broken hop may have run. A busy answer with
// no broken hop before it is the owner's own: known, it did not run.
func TestABusyAnswerAfterABrokenHopIsOfUnknownOutcome(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, a, b := twoNodesWithShortLeases(t, reg, "/busy-ranbefore-test/", parts)
	onB := counterOwnedBy(t, a, b)
	busy, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrTimeout, "actor", "busy", "waited until the deadline for the turn of counter: this call did not run"))
	broken := status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded send")
	r := remote{a.view}
	for _, c := range []struct {
		what    string
		answers []error
		unknown bool
	}{
		{"a hop that broke off, then actor.busy", []error{broken, busy.Err()}, true},
		{"actor.busy at once", []error{busy.Err()}, false},
	} {
		hops := 0
		err := r.do(ctx, onB, resendKeyed, func() error { return errors.New("the partition moved to the caller's node") }, func(*server.PeerConn) error {
			hops++
			if hops > len(c.answers) {
				return errors.New("sent more often than the test answers")
			}
			return c.answers[hops-1]
		})
		var re *rivet.Error
		if hops != len(c.answers) || !errors.Is(err, rivet.ErrTimeout) || !errors.As(err, &re) || re.Code != "busy" || rivet.OutcomeUnknown(err) != c.unknown {
			t.Errorf("%s: %v after %d hops (outcome unknown %v); want actor.busy after %d, outcome unknown %v", c.what, err, hops, rivet.OutcomeUnknown(err), len(c.answers), c.unknown)
		}
	}
}

// counterOwnedBy is a counter whose partition b owns, as a, which routes
// to it, finds it.
func counterOwnedBy(t *testing.T, a, b *Node) runtime.Ref {
	t.Helper()
	for i := range 1000 {
		ref := runtime.Ref{Name: "counter", Key: []string{fmt.Sprint("r", i)}}
		if p, err := a.host.PartitionOf(ref); err != nil {
			t.Fatal(err)
		} else if b.host.Owns(p) {
			return ref
		}
	}
	t.Fatal("no counter of 1000 keys is on b")
	return runtime.Ref{}
}
