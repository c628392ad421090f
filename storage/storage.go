package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Implementations wrap them with %w; callers test with
// errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrFenced: a transaction's fence no longer holds (the partition's owner
	// claim was lost, released or replaced). Nothing was written.
	ErrFenced = errors.New("storage: fenced: partition ownership changed")
	// ErrConditionFailed: a transaction's condition (Cond) did not hold.
	// Nothing was written.
	ErrConditionFailed = errors.New("storage: condition failed")
	// ErrTooLarge: a transaction exceeds the store's limits (Limits) and was
	// refused whole, never truncated.
	ErrTooLarge = errors.New("storage: transaction too large")
	// ErrInvalidTxn: a transaction is malformed: it writes one key twice,
	// puts a key under one of its own deletes, or has an empty key or an
	// unknown op or cond kind. etcd refuses such a transaction whole
	// ("duplicate key given in txn request"); the memory twin does too.
	// Nothing was written.
	ErrInvalidTxn = errors.New("storage: invalid transaction")
	// ErrLeaseNotFound: the lease expired or was revoked.
	ErrLeaseNotFound = errors.New("storage: lease not found")
	// ErrClosed: the store or committer was closed.
	ErrClosed = errors.New("storage: closed")
	// ErrRefused: the store refused the transaction for a reason of its
	// own, not of the transaction (etcd: too many requests). Nothing was
	// written; trying again later may succeed. (etcd's "database space
	// exceeded" is not one: it can come after the write applied. But
	// once it has come, etcdstore refuses writes that put itself, unsent,
	// with ErrRefused, until etcd's NOSPACE alarm is gone.)
	ErrRefused = errors.New("storage: refused by the store")
	// ErrNoSpace: the store is out of space (etcd's NOSPACE alarm). It
	// comes with ErrRefused on a write refused unsent, with nothing
	// written; alone on etcd's own answer, which can come after the
	// write applied.
	ErrNoSpace = errors.New("storage: out of space")
	// ErrNotSent: a Committer's caller gave up (its context ended) while
	// the transaction still waited in the queue: it was never sent, and
	// nothing was written. It comes wrapped with the context's error.
	ErrNotSent = errors.New("storage: never sent to the store")
	// ErrCompacted: a Watch asked for changes from a revision the store no
	// longer keeps (etcd compacted its history). Nothing can resume that
	// watch: the watcher must read again (ListRev) and watch from the new
	// revision.
	ErrCompacted = errors.New("storage: revision compacted")
)

// KV is one key as read. Value is owned by the caller.
type KV struct {
	Key   string
	Value []byte
	// CreateRevision and ModRevision are the store's revisions at which the
	// key was created and last modified; they only ever grow.
	CreateRevision int64
	ModRevision    int64
	// Lease is the lease the key is attached to, 0 if none.
	Lease LeaseID
}

// LeaseID identifies a lease: keys attached to it vanish when it expires or
// is revoked.
type LeaseID int64

// Fence ties a transaction to a partition owner claim. The zero Fence
// (Token 0) fences nothing and is only for writes outside partitions.
type Fence struct {
	Partition uint32
	// Token is the claim's fencing token as returned by Claim.
	Token int64
}

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpPut sets Key to Value.
	OpPut OpKind = iota + 1
	// OpDelete deletes Key; deleting a missing key is not an error.
	OpDelete
	// OpDeletePrefix deletes every key that starts with Key.
	OpDeletePrefix
)

// Op is one write of a transaction. A store may read Value until the
// Commit (or the Committer's request) it is part of has returned, and a
// little beyond for a request its caller left: its owner does not change
// it once handed over.
type Op struct {
	Kind  OpKind
	Key   string
	Value []byte
}

// Put returns an OpPut.
func Put(key string, value []byte) Op { return Op{Kind: OpPut, Key: key, Value: value} }

// Delete returns an OpDelete.
func Delete(key string) Op { return Op{Kind: OpDelete, Key: key} }

// DeletePrefix returns an OpDeletePrefix.
func DeletePrefix(prefix string) Op { return Op{Kind: OpDeletePrefix, Key: prefix} }

// CondKind says what a Cond requires.
type CondKind uint8

const (
	// CondAbsent requires that Key does not exist.
	CondAbsent CondKind = iota + 1
	// CondPresent requires that Key exists.
	CondPresent
	// CondUnchanged requires that Key was last modified at revision Rev
	// (a KV's ModRevision): nothing wrote or deleted it since it was read
	// at that revision. Rev 0 requires that Key does not exist.
	CondUnchanged
)

// Cond is a precondition of a transaction.
type Cond struct {
	Kind CondKind
	Key  string
	// Rev is the revision CondUnchanged compares with; the other kinds
	// leave it 0.
	Rev int64
}

// Absent returns a CondAbsent.
func Absent(key string) Cond { return Cond{Kind: CondAbsent, Key: key} }

// Present returns a CondPresent.
func Present(key string) Cond { return Cond{Kind: CondPresent, Key: key} }

// Unchanged returns a CondUnchanged: key is still as modRev (its
// ModRevision when read) left it.
func Unchanged(key string, modRev int64) Cond {
	return Cond{Kind: CondUnchanged, Key: key, Rev: modRev}
}

// Txn is one atomic unit of writes: all of Ops apply, or none. It applies
// only if Fence holds and every Cond holds. A Txn must not put or delete the
// same key twice, and a put must not fall under one of its own prefix
// deletes (etcd refuses both).
type Txn struct {
	Fence Fence
	Conds []Cond
	Ops   []Op
}

// Size returns the bytes the Txn adds to a store request (keys and values),
// the figure that Limits.MaxTxnBytes bounds.
func (t *Txn) Size() int {
	n := 0
	for _, c := range t.Conds {
		n += len(c.Key) + 16
	}
	for _, o := range t.Ops {
		n += len(o.Key) + len(o.Value) + 16
	}
	return n
}

// Limits are a store's bounds on one transaction.
type Limits struct {
	// MaxTxnOps bounds both the number of compares and the number of
	// writes of one store transaction (etcd: --max-txn-ops, default 128).
	MaxTxnOps int
	// MaxTxnBytes bounds the Size of one store transaction, with a margin
	// under the store's request limit (etcd: --max-request-bytes, 1.5 MiB).
	MaxTxnBytes int
}

// ListOptions shape a List.
type ListOptions struct {
	// StartAfter skips keys up to and including it; "" starts at prefix.
	StartAfter string
	// Limit bounds the number of keys returned; 0 means no bound.
	Limit int
	// KeysOnly leaves Value nil.
	KeysOnly bool
	// Revision reads the keys as they were at that store revision; 0
	// reads them now. A revision older than the store's history fails
	// with ErrCompacted, one newer than the store's with an error.
	Revision int64
}

// EventType says what an Event did to its key.
type EventType uint8

const (
	// EventPut: the key was created or overwritten.
	EventPut EventType = iota + 1
	// EventDelete: the key was deleted, by a delete, a prefix delete, or
	// the expiry or revocation of its lease.
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one change of one key, as a Watch reports it.
type Event struct {
	Type EventType
	// KV is the key as the change left it. For EventDelete only Key and
	// ModRevision (the revision of the delete) are set, and Value is nil.
	KV KV
}

// WatchResponse is one batch of changes from a Watch.
type WatchResponse struct {
	// Events are in revision order. The events of one revision (one
	// transaction, one lease expiry) are never split across responses.
	Events []Event
	// Revision is how far the watcher has come: every change under the
	// prefix up to and including Revision has been delivered. It is at
	// least the revision of the last event.
	Revision int64
	// Err, if set, is the last response: the channel closes after it.
	// ErrCompacted (wrapped) means the revision asked for is gone (re-list
	// and watch again); ErrClosed means the store was closed; anything else
	// is a store failure after which the watcher cannot know what it missed
	// (it too calls for a re-list).
	Err error
}

// Claim is a partition's owner claim.
type Claim struct {
	Partition uint32
	Node      string
	// Token is the fencing token: it changes every time the partition is
	// claimed anew, and a write fenced with an older token fails.
	Token int64
	Lease LeaseID
}

// GrantedTTLs is implemented by a store that knows the TTL it granted a
// lease, which may exceed the TTL asked for (etcd rounds it up to whole
// seconds and raises it to its minimum).
type GrantedTTLs interface {
	// GrantedTTL returns the TTL lease was granted by this store, 0 if
	// it does not know.
	GrantedTTL(lease LeaseID) time.Duration
}

// Store is a durable, linearizable key-value store with fenced
// transactions. Keys are relative to the store's namespace. All methods are
// safe for concurrent use. Byte slices passed in are not retained; byte
// slices returned are owned by the caller.
type Store interface {
	// Get reads one key. Returns ErrNotFound if it does not exist.
	Get(ctx context.Context, key string) (KV, error)
	// List reads the keys that start with prefix, in key order.
	List(ctx context.Context, prefix string, opts ListOptions) ([]KV, error)
	// ListRev is List plus the store revision the result was read at: a
	// Watch from rev+1 then sees every later change exactly once.
	ListRev(ctx context.Context, prefix string, opts ListOptions) (kvs []KV, rev int64, err error)
	// Count returns how many keys start with prefix.
	Count(ctx context.Context, prefix string) (int64, error)

	// Watch streams the changes to keys under prefix from revision fromRev
	// on (inclusive); fromRev <= 0 means from the revision at which the
	// store registers the watch, which the caller cannot know, so a watcher
	// that must miss nothing passes ListRev's rev+1. A fromRev older than
	// the store's history gets ErrCompacted.
	//
	// The channel is closed once ctx is done, or right after a response
	// with Err (ErrClosed if the store is closed). Responses are never
	// dropped: the channel has a small buffer and then the watch's own
	// goroutine waits for the reader, so the caller must keep reading or
	// cancel ctx, and must cancel ctx in the end to free the watch. Event
	// values are owned by the caller.
	Watch(ctx context.Context, prefix string, fromRev int64) <-chan WatchResponse

	// Commit applies txns as ONE atomic transaction: every write of every
	// txn, or nothing. It fails with ErrFenced if any fence fails, with
	// ErrConditionFailed if any condition fails (ErrFenced wins if both),
	// with ErrTooLarge if the packed transaction exceeds Limits, and with
	// ErrInvalidTxn if it writes a key twice (across txns too: packed txns
	// must not overlap). It does not say which txn failed: the Committer
	// splits and retries to learn it.
	Commit(ctx context.Context, txns ...Txn) error
	// Limits returns the store's transaction bounds.
	Limits() Limits

	// PutIfAbsent creates key with value if it does not exist, and returns
	// the value that is stored after the call and whether this call created it.
	// A put over Limits fails with ErrTooLarge.
	PutIfAbsent(ctx context.Context, key string, value []byte) (stored []byte, created bool, err error)
	// PutLeased sets key to value attached to lease (unfenced; for records
	// such as a node's registration that live and die with the node), in
	// one atomic step with checking conds: it fails with
	// ErrConditionFailed, writing nothing, if one of them does not hold.
	// Returns ErrLeaseNotFound if the conds hold but the lease is gone
	// (lease 0 is none), ErrTooLarge if the put and conds exceed Limits,
	// ErrInvalidTxn for an empty key or a malformed cond.
	PutLeased(ctx context.Context, key string, value []byte, lease LeaseID, conds ...Cond) error

	// GrantLease creates a lease that expires ttl after its last renewal.
	GrantLease(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// KeepAlive renews lease until ctx is done (then returns nil). After
	// each successful renewal it calls renewed(validUntil), where
	// validUntil is a lower bound on when the store can expire the lease:
	// the time the renewal request was sent plus the lease's TTL. A node
	// that stops serving by validUntil has stopped before any other node
	// can claim its partitions. renewed may be nil; it runs on KeepAlive's
	// goroutine and must not block.
	//
	// It returns ErrLeaseNotFound (wrapped) as soon as the lease is known
	// to be lost, including when time.Now() passes the last validUntil
	// without a successful renewal (the store may be unreachable; the lease
	// may be gone already); from then on every claim on it is gone. A
	// lease that this store did not grant, and whose first renewal fails,
	// counts as lost. It returns ErrClosed if the store is closed.
	KeepAlive(ctx context.Context, lease LeaseID, renewed func(validUntil time.Time)) error
	// RevokeLease deletes the lease and every key attached to it, including
	// owner claims. Revoking a missing lease is not an error.
	RevokeLease(ctx context.Context, lease LeaseID) error

	// Claim claims, for node on lease, each of the partitions that has no
	// owner, and returns the claims it made (partitions owned by anyone,
	// this node included, are skipped). Returns ErrLeaseNotFound if the
	// lease is gone.
	Claim(ctx context.Context, node string, lease LeaseID, partitions []uint32) ([]Claim, error)
	// Release gives up a claim; it is a no-op if the claim's token no
	// longer holds. Later writes fenced with it fail. It returns the
	// store revision of the claim's delete if this call deleted it, else
	// 0: a write fenced with the claim applied before that revision or
	// never will.
	Release(ctx context.Context, c Claim) (int64, error)
	// Claims returns every current owner claim, ordered by partition.
	Claims(ctx context.Context) ([]Claim, error)

	// Close releases the store's resources (not its leases).
	Close() error
}
