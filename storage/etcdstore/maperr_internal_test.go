package etcdstore

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/rivet-go/rivet/storage"
)

// etcd's errors map to the storage classes the committer and the runtime
// act on: definite failures (nothing written) must not read as "outcome
// unknown", which costs a re-fence, nor as the caller's fault (too large).
func TestMapErrClassifiesEtcdErrors(t *testing.T) {
	for _, c := range []struct {
		in   error
		want error
	}{
		{rpctypes.ErrTooManyRequests, storage.ErrRefused},
		{rpctypes.ErrTooManyOps, storage.ErrTooLarge},
		{rpctypes.ErrRequestTooLarge, storage.ErrTooLarge},
		{rpctypes.ErrDuplicateKey, storage.ErrInvalidTxn},
		{rpctypes.ErrLeaseNotFound, storage.ErrLeaseNotFound},
		{context.DeadlineExceeded, context.DeadlineExceeded},
	} {
		if got := mapErr(c.in); !errors.Is(got, c.want) {
			t.Errorf("mapErr(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	// Whether a timed-out request applied is unknown: no definite class.
	// Nor for "database space exceeded": etcd's apply answers it after
	// writing the txn that crossed the quota (TestAWriteThatFillsTheDatabaseIsInDoubt).
	for _, in := range []error{rpctypes.ErrTimeout, rpctypes.ErrNoSpace, rpctypes.ErrGRPCNoSpace} {
		got := mapErr(in)
		for _, definite := range []error{storage.ErrRefused, storage.ErrTooLarge, storage.ErrInvalidTxn, storage.ErrFenced, storage.ErrConditionFailed} {
			if errors.Is(got, definite) {
				t.Errorf("mapErr(%v) = %v, a definite failure", in, got)
			}
		}
	}
	// Either form says etcd is out of space, clientv3's (PutIfAbsent's)
	// too: a starting node waits on it (storage.ErrNoSpace) rather than
	// exiting with its member.
	for _, in := range []error{rpctypes.ErrNoSpace, rpctypes.ErrGRPCNoSpace} {
		if got := mapErr(in); !errors.Is(got, storage.ErrNoSpace) {
			t.Errorf("mapErr(%v) = %v, want storage.ErrNoSpace", in, got)
		}
	}
}
