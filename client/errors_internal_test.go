package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A call that the caller's deadline ended says so, in the same words and
// kind whichever way the transport saw the stream end: gRPC reports a reset
// by the node ("stream terminated by RST_STREAM with error code: CANCEL")
// or its own timer ("context deadline exceeded"), and a user trial's logs
// had both for the same failure. A node's own explanation is kept.
func TestADeadlineEndingACallReadsTheSameWhateverTheTransportSaw(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	for _, st := range []*status.Status{
		status.New(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"),
		status.New(codes.DeadlineExceeded, "context deadline exceeded"),
	} {
		err := fromStatus(ctx, st)
		if err.Error() != "context deadline exceeded" || !errors.Is(err, rivet.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || Code(err) != codes.DeadlineExceeded {
			t.Errorf("%v: got %q (timeout %v, deadline %v, code %v); want the deadline's own words, a timeout, DEADLINE_EXCEEDED",
				st.Err(), err, errors.Is(err, rivet.ErrTimeout), errors.Is(err, context.DeadlineExceeded), Code(err))
		}
		if !rivet.OutcomeUnknown(err) {
			t.Errorf("%v: outcome known, want unknown (the call may have run)", st.Err())
		}
	}
	// The node's own words about a deadline stay.
	const said = "waited until the deadline for the turn of counter [a]"
	st, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrTimeout, said))
	if err := fromStatus(ctx, st); !errors.Is(err, rivet.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), said) {
		t.Errorf("node's deadline error: got %q; want its own words, a timeout, the deadline", err)
	}
	// A caller that cancelled (no deadline): the transport's status stays,
	// matching context.Canceled.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	err := fromStatus(cctx, status.New(codes.Canceled, "context canceled"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, rivet.ErrTimeout) {
		t.Errorf("cancelled call: %v (canceled %v, timeout %v); want context.Canceled, not a timeout", err, errors.Is(err, context.Canceled), errors.Is(err, rivet.ErrTimeout))
	}
}
