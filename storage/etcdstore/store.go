package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/storage"
)

// DefaultPrefix is the namespace of a rivet cluster's keys in etcd.
const DefaultPrefix = "/rivet/"

// Store is a storage.Store over etcd. Its methods make one etcd request
// each, except Claim (one per batch of partitions), KeepAlive (one per
// renewal) and Watch (one watch on the client's shared watch stream).
type Store struct {
	cli    *clientv3.Client
	kv     clientv3.KV // namespaced: keys are relative to the prefix
	prefix string      // the namespace, for Watch, Commit and the term probe, which do not use kv
	limits storage.Limits

	closeOnce sync.Once
	closed    chan struct{}

	// mu guards leases and the fields of its values.
	mu sync.Mutex
	// leases holds what this store knows of the leases it granted or
	// renews, so that KeepAlive starts from a known TTL and validity, and
	// ends at once when this store revokes the lease. Entries go when the
	// lease is revoked or KeepAlive finds it lost; a lease left to expire
	// unwatched keeps its few bytes until the store goes.
	leases map[storage.LeaseID]*leaseState

	// raw is the KV API Commit sends to, with its request built directly
	// (WithKVClient, or the client's own), and rawOpts the call options it
	// sends with.
	raw     pb.KVClient
	rawOpts []grpc.CallOption

	// leader, if set, tells of etcd leader changes (WithLeaderChanges);
	// without it, probe (WithTermProbe) learns of them from raft terms.
	// The writes in flight are tracked in inflight, each with the
	// leaderEpoch (count of changes seen) it began in.
	leader      LeaderChanges
	probe       bool   // WithTermProbe, and no leader
	term        uint64 // the newest raft term seen (probe), under inflightMu
	inflightMu  sync.Mutex
	inflight    map[uint64]trackedCommit
	nextCommit  uint64
	leaderEpoch uint64
	bg          sync.WaitGroup // followLeader or probeTerms
	// probeCtx ends when the store closes, so that a probe waiting for a
	// leader does not hold up Close.
	probeCtx    context.Context
	probeCancel context.CancelFunc

	// full is set when etcd answers a write "database space exceeded"
	// (its NOSPACE alarm): from then on writes that put are refused
	// unsent (errNoSpace, definite) rather than sent to be refused by
	// etcd in an answer that cannot be told from the one of a write that
	// applied, and so put in doubt (mapErr): every write would re-fence
	// its partition, whose claim, a put too, etcd refuses. Every
	// noSpaceRecheck, a write asks etcd's alarms first, and goes if
	// NOSPACE is gone. Guarded by spaceMu, with fullChecked, the time of
	// the last question or NOSPACE answer.
	spaceMu     sync.Mutex
	full        bool
	fullChecked time.Time
}

type leaseState struct {
	// ttl is the lease's TTL as etcd granted it (at least etcd's minimum).
	ttl time.Duration
	// validUntil is the send time of the last successful grant or renewal
	// plus ttl: etcd cannot expire the lease before it. Zero if unknown.
	validUntil time.Time
	// revoked is closed when this store revokes the lease.
	revoked chan struct{}
}

var _ storage.Store = (*Store)(nil)

// Option changes a Store's defaults.
type Option func(*Store)

// WithLimits sets the transaction bounds the Store enforces before sending,
// for an etcd run with other --max-txn-ops or --max-request-bytes than the
// defaults (storage.DefaultLimits).
func WithLimits(l storage.Limits) Option { return func(s *Store) { s.limits = l } }

// New returns a Store whose keys live under prefix in the etcd that cli
// talks to. The caller keeps owning cli: Close does not close it.
func New(cli *clientv3.Client, prefix string, opts ...Option) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcdstore: nil client")
	}
	s := &Store{
		cli:    cli,
		kv:     namespace.NewKV(cli.KV, prefix),
		prefix: prefix,
		limits: storage.DefaultLimits(),
		closed: make(chan struct{}),
		leases: make(map[storage.LeaseID]*leaseState),
	}
	for _, o := range opts {
		o(s)
	}
	if s.limits.MaxTxnOps <= 0 || s.limits.MaxTxnBytes <= 0 {
		return nil, fmt.Errorf("etcdstore: bad limits %+v", s.limits)
	}
	if s.raw == nil {
		// Commit talks to etcd's KV API itself (see WithKVClient): a
		// client of etcd's endpoints has it on its connection; one in
		// process (Embedded.Client) has none, and Embedded.KVClient
		// must be given.
		if cli.ActiveConnection() == nil {
			return nil, errors.New("etcdstore: a client without a connection (in process) needs WithKVClient(Embedded.KVClient())")
		}
		s.raw, s.rawOpts = clientv3.RetryKVClient(cli), []grpc.CallOption{grpc.WaitForReady(true)}
	}
	if s.leader != nil {
		s.probe = false // a member in this process tells of changes itself
	}
	if s.leader != nil || s.probe {
		s.inflight = make(map[uint64]trackedCommit)
	}
	if s.leader != nil {
		s.bg.Add(1)
		go s.followLeader()
	} else if s.probe {
		s.probeCtx, s.probeCancel = context.WithCancel(context.Background())
		s.bg.Add(1)
		go s.probeTerms()
	}
	return s, nil
}

// mapErr turns etcd's errors into storage's sentinels, keeping etcd's text.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, rpctypes.ErrTooManyRequests):
		// Checked before the request is proposed: definite. Not so
		// "database space exceeded": etcd's apply writes the txn, then
		// answers that if the txn crossed the quota, as it answers a txn
		// refused before its proposal; whether it was written is unknown
		// (the default case).
		return fmt.Errorf("%w: %v", storage.ErrRefused, err)
	case noSpace(err):
		// As it comes over gRPC (RESOURCE_EXHAUSTED), or as clientv3
		// turns it into its own error (PutIfAbsent, Put): not too large,
		// but space exceeded, in doubt as above. (The Store then refuses
		// writes unsent while etcd stays full: spaceLeft.)
		return fmt.Errorf("etcdstore: %w: %w", storage.ErrNoSpace, err)
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge),
		status.Code(err) == codes.ResourceExhausted:
		return fmt.Errorf("%w: %v", storage.ErrTooLarge, err)
	case errors.Is(err, rpctypes.ErrDuplicateKey), errors.Is(err, rpctypes.ErrEmptyKey):
		return fmt.Errorf("%w: %v", storage.ErrInvalidTxn, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %v", storage.ErrLeaseNotFound, err)
	}
	return fmt.Errorf("etcdstore: %w", err)
}

// noSpaceRecheck is how often, while etcd is out of space, a write asks
// etcd's alarms whether it still is.
const noSpaceRecheck = time.Second

// errNoSpace refuses, unsent, a write that puts while etcd is out of space.
var errNoSpace = fmt.Errorf("%w: %w: etcd is out of space (%v; alarm NOSPACE): not sent; writes resume once an operator frees space and disarms the alarm",
	storage.ErrRefused, storage.ErrNoSpace, rpctypes.ErrGRPCNoSpace)

// spaceLeft returns errNoSpace while etcd is known to be out of space.
// One write asks at a time; the others meanwhile are refused.
func (s *Store) spaceLeft(ctx context.Context) error {
	s.spaceMu.Lock()
	if !s.full {
		s.spaceMu.Unlock()
		return nil
	}
	ask := time.Since(s.fullChecked) >= noSpaceRecheck
	asked := time.Now()
	if ask {
		s.fullChecked = asked
	}
	s.spaceMu.Unlock()
	if !ask {
		return errNoSpace
	}
	// Any client may list alarms (only raising and disarming them are an
	// admin's).
	actx, cancel := context.WithTimeout(ctx, noSpaceRecheck)
	resp, err := s.cli.AlarmList(actx)
	cancel()
	if err != nil || slices.ContainsFunc(resp.Alarms, func(a *pb.AlarmMember) bool { return a.Alarm == pb.AlarmType_NOSPACE }) {
		return errNoSpace
	}
	s.spaceMu.Lock()
	if s.fullChecked.Equal(asked) {
		// Not if a NOSPACE answer came meanwhile (sawNoSpace).
		s.full = false
	}
	s.spaceMu.Unlock()
	return nil
}

// noSpace says whether err is etcd's "database space exceeded", as its
// gRPC status (the raw KV API) or as clientv3's error.
func noSpace(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrGRPCNoSpace) || errors.Is(err, rpctypes.ErrNoSpace))
}

// sawNoSpace notes a write's error (etcd's, unmapped): "database space
// exceeded" closes spaceLeft's gate. It returns err.
func (s *Store) sawNoSpace(err error) error {
	if noSpace(err) {
		s.spaceMu.Lock()
		s.full, s.fullChecked = true, time.Now()
		s.spaceMu.Unlock()
	}
	return err
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return storage.ErrClosed
	}
	return nil
}

func toKV(kv *mvccpb.KeyValue, keysOnly bool) storage.KV {
	out := storage.KV{
		Key:            string(kv.Key),
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Lease:          storage.LeaseID(kv.Lease),
	}
	if !keysOnly {
		out.Value = kv.Value
		if out.Value == nil {
			out.Value = []byte{}
		}
	}
	return out
}

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string) (storage.KV, error) {
	if err := s.check(ctx); err != nil {
		return storage.KV{}, err
	}
	resp, err := s.kv.Get(ctx, key)
	if err != nil {
		return storage.KV{}, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return storage.KV{}, fmt.Errorf("%w: %q", storage.ErrNotFound, key)
	}
	return toKV(resp.Kvs[0], false), nil
}

// rangeEnd returns the end of the range of keys under prefix; "\x00" means
// the end of the namespace.
func rangeEnd(prefix string) string {
	if prefix == "" {
		return "\x00"
	}
	return clientv3.GetPrefixRangeEnd(prefix)
}

// withEnd is the option of a range that ends at end. The namespace wrapper
// refuses an empty start key unless the option says "from key".
func withEnd(end string) clientv3.OpOption {
	if end == "\x00" {
		return clientv3.WithFromKey()
	}
	return clientv3.WithRange(end)
}

// List implements storage.Store.
func (s *Store) List(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix, opts)
	return kvs, err
}

// ListRev implements storage.Store. The revision is the header revision
// of the range request (of the first, if it took several): the store's
// revision when etcd served it.
//
// A range whose answer is larger than the client may receive (its
// MaxCallRecvMsgSize: a node's is 64 MiB) is read again a page at a time,
// at the revision of the first page, as one range would read it: each
// value is bounded by a transaction's size, but their total is not (a
// workflow's history of large step outputs, say), and the key's owner
// could not be read at all.
func (s *Store) ListRev(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, int64, error) {
	kvs, rev, err := s.listOnce(ctx, prefix, opts)
	if responseTooLarge(err) {
		return s.listPaged(ctx, prefix, opts)
	}
	return kvs, rev, err
}

// listPageMax is the most keys listPaged asks for in one page; it halves
// the page while an answer is too large, down to a key a page (a key and
// its value always fit, bounded by a transaction's size), and doubles it
// back after each page that fit.
const listPageMax = 256

// listPaged is ListRev a page at a time (see ListRev).
func (s *Store) listPaged(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, int64, error) {
	var out []storage.KV
	rev := opts.Revision
	page := listPageMax
	po := opts
	for {
		po.Limit = page
		if opts.Limit > 0 {
			po.Limit = min(page, opts.Limit-len(out))
		}
		kvs, r, err := s.listOnce(ctx, prefix, po)
		if responseTooLarge(err) && page > 1 {
			page /= 2
			continue
		}
		if errors.Is(err, storage.ErrCompacted) && opts.Revision == 0 && len(out) > 0 {
			// The first page's revision went meanwhile: the caller
			// asked for none, so the list starts again, at a new one.
			out, po.StartAfter, po.Revision = nil, opts.StartAfter, 0
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if po.Revision == 0 {
			po.Revision, rev = r, r
		}
		out = append(out, kvs...)
		if len(kvs) < po.Limit || opts.Limit > 0 && len(out) >= opts.Limit {
			return out, rev, nil
		}
		po.StartAfter = kvs[len(kvs)-1].Key
		page = min(2*page, listPageMax)
	}
}

// responseTooLarge says that err is a read's answer larger than the client
// may receive. (Etcd's other RESOURCE_EXHAUSTED, out of space, answers
// writes only.)
func responseTooLarge(err error) bool {
	var e *responseTooLargeError
	return errors.As(err, &e)
}

// responseTooLargeError is listOnce's error for an answer larger than the
// client may receive: ErrTooLarge, as mapErr makes it.
type responseTooLargeError struct{ err error }

func (e *responseTooLargeError) Error() string { return e.err.Error() }
func (e *responseTooLargeError) Unwrap() error { return e.err }

// listOnce is ListRev in one range request.
func (s *Store) listOnce(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, int64, error) {
	if err := s.check(ctx); err != nil {
		return nil, 0, err
	}
	start, end := prefix, rangeEnd(prefix)
	if opts.StartAfter != "" && opts.StartAfter+"\x00" > start {
		start = opts.StartAfter + "\x00"
	}
	ops := []clientv3.OpOption{withEnd(end)}
	if opts.Revision != 0 {
		ops = append(ops, clientv3.WithRev(opts.Revision))
	}
	if end != "\x00" && start >= end {
		// Nothing can match, but the caller still needs the revision, and
		// to hear of a revision compacted or in the future, as from any
		// read at it.
		resp, err := s.kv.Get(ctx, prefix, append(ops, clientv3.WithCountOnly())...)
		if errors.Is(err, rpctypes.ErrCompacted) {
			return nil, 0, fmt.Errorf("%w: read at revision %d: %v", storage.ErrCompacted, opts.Revision, err)
		}
		if err != nil {
			return nil, 0, mapErr(err)
		}
		return nil, resp.Header.Revision, nil
	}
	if opts.Limit > 0 {
		ops = append(ops, clientv3.WithLimit(int64(opts.Limit)))
	}
	if opts.KeysOnly {
		ops = append(ops, clientv3.WithKeysOnly())
	}
	resp, err := s.kv.Get(ctx, start, ops...)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil, 0, fmt.Errorf("%w: read at revision %d: %v", storage.ErrCompacted, opts.Revision, err)
	}
	// gRPC's own words for an answer over the client's receive limit; etcd
	// answers RESOURCE_EXHAUSTED too when it is out of space or overloaded
	// ("too many requests"), which pages would not help.
	if err != nil && status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "larger than max") {
		return nil, 0, &responseTooLargeError{mapErr(err)}
	}
	if err != nil {
		return nil, 0, mapErr(err)
	}
	out := make([]storage.KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = toKV(kv, opts.KeysOnly)
	}
	return out, resp.Header.Revision, nil
}

// Count implements storage.Store.
func (s *Store) Count(ctx context.Context, prefix string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	resp, err := s.kv.Get(ctx, prefix, withEnd(rangeEnd(prefix)), clientv3.WithCountOnly())
	if err != nil {
		return 0, mapErr(err)
	}
	return resp.Count, nil
}

// Limits implements storage.Store.
func (s *Store) Limits() storage.Limits { return s.limits }

// Commit implements storage.Store with one etcd txn:
//
//	If(CreateRevision(owner key) == token, once per distinct fence;
//	   CreateRevision(key) == 0 for CondAbsent, > 0 for CondPresent;
//	   ModRevision(key) == Rev for CondUnchanged)
//	Then(every op)
//	Else(Get of every fenced owner key)
//
// The Else reads tell a lost fence (ErrFenced) from a failed cond.
func (s *Store) Commit(ctx context.Context, txns ...storage.Txn) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.limits.Check(txns...); err != nil {
		return err
	}
	return s.commit(ctx, txns)
}

// committed reads Commit's answer: nil if it applied, else which of its
// fences or conds failed.
func (s *Store) committed(resp *pb.TxnResponse, fences []storage.Fence) error {
	s.observe(resp.Header.GetRaftTerm())
	if resp.Succeeded {
		return nil
	}
	for i, f := range fences {
		kvs := resp.Responses[i].GetResponseRange().GetKvs()
		if len(kvs) == 0 || kvs[0].CreateRevision != f.Token {
			return fmt.Errorf("%w: partition %d, token %d", storage.ErrFenced, f.Partition, f.Token)
		}
	}
	return storage.ErrConditionFailed
}

// PutIfAbsent implements storage.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, false, err
	}
	if key == "" {
		return nil, false, fmt.Errorf("%w: empty key", storage.ErrInvalidTxn)
	}
	// Held to the Limits, as Commit is, so that both stores refuse at the
	// same size: etcd's own bound lies above them, unknown to the twin.
	if err := s.limits.Check(storage.Txn{Ops: []storage.Op{storage.Put(key, value)}}); err != nil {
		return nil, false, err
	}
	if err := s.spaceLeft(ctx); err != nil {
		return nil, false, err
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, false, mapErr(s.sawNoSpace(err))
	}
	if resp.Succeeded {
		return slices.Clone(value), true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		// Deleted between the compare and the read cannot happen in one
		// txn; a missing key here is etcd breaking its contract.
		return nil, false, fmt.Errorf("etcdstore: PutIfAbsent %q: key neither absent nor present", key)
	}
	v := kvs[0].Value
	if v == nil {
		v = []byte{}
	}
	return v, false, nil
}

// PutLeased implements storage.Store: a plain put, or with conds
//
//	If(the conds, as Commit compares them) Then(Put(key, value, lease))
//
// etcd checks the lease only on the branch it runs, so failed conds are
// ErrConditionFailed whatever became of the lease.
func (s *Store) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", storage.ErrInvalidTxn)
	}
	// Within the Limits, as Commit (see PutIfAbsent).
	if err := s.limits.Check(storage.Txn{Conds: conds, Ops: []storage.Op{storage.Put(key, value)}}); err != nil {
		return err
	}
	if lease != 0 {
		if err := s.spaceLeft(ctx); err != nil {
			return err
		}
	}
	if len(conds) == 0 {
		if lease == 0 {
			return noLease()
		}
		_, err := s.kv.Put(ctx, key, string(value), clientv3.WithLease(clientv3.LeaseID(lease)))
		return mapErr(s.sawNoSpace(err))
	}
	cmps := make([]clientv3.Cmp, len(conds))
	for i, c := range conds {
		if c.Key == "" {
			return fmt.Errorf("%w: empty cond key", storage.ErrInvalidTxn)
		}
		switch c.Kind {
		case storage.CondAbsent:
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), "=", 0)
		case storage.CondPresent:
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), ">", 0)
		case storage.CondUnchanged:
			cmps[i] = clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Rev)
		default:
			return fmt.Errorf("%w: unknown cond kind %d", storage.ErrInvalidTxn, c.Kind)
		}
	}
	var then []clientv3.Op
	if lease != 0 {
		then = append(then, clientv3.OpPut(key, string(value), clientv3.WithLease(clientv3.LeaseID(lease))))
	}
	resp, err := s.kv.Txn(ctx).If(cmps...).Then(then...).Commit()
	if err != nil {
		return mapErr(s.sawNoSpace(err))
	}
	if !resp.Succeeded {
		return storage.ErrConditionFailed
	}
	if lease == 0 {
		// The conds held: the answer is the lease's, as for a lease gone.
		return noLease()
	}
	return nil
}

// noLease is the error of a write on lease 0. etcd takes lease 0 for "no
// lease": the key would outlive the node it stands for (an owner claim, a
// node record), where the memory twin, like a lease that is gone, refuses.
func noLease() error {
	return fmt.Errorf("%w: lease 0 is no lease", storage.ErrLeaseNotFound)
}

// GrantLease implements storage.Store. etcd keeps TTLs in whole seconds
// (rounded up here) and raises them to its minimum (1.5 election
// timeouts, 2 s with the default timing).
func (s *Store) GrantLease(ctx context.Context, ttl time.Duration) (storage.LeaseID, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	sent := time.Now()
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, mapErr(s.sawNoSpace(err))
	}
	id := storage.LeaseID(resp.ID)
	granted := time.Duration(resp.TTL) * time.Second
	s.mu.Lock()
	s.leases[id] = &leaseState{ttl: granted, validUntil: sent.Add(granted), revoked: make(chan struct{})}
	s.mu.Unlock()
	return id, nil
}

// GrantedTTL implements storage.GrantedTTLs: the TTL etcd granted lease,
// if this store granted or renewed it, else 0.
func (s *Store) GrantedTTL(lease storage.LeaseID) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls := s.leases[lease]; ls != nil {
		return ls.ttl
	}
	return 0
}

// lease returns what the store knows of id: its revoked channel, ttl and
// validUntil (zero if unknown). A lease it did not grant is tracked from
// now on, its ttl and validUntil unknown, so that a revocation by this
// store during its first renewal closes the channel the renewal checks.
func (s *Store) lease(id storage.LeaseID) (<-chan struct{}, time.Duration, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.leases[id]
	if ls == nil {
		ls = &leaseState{revoked: make(chan struct{})}
		s.leases[id] = ls
	}
	return ls.revoked, ls.ttl, ls.validUntil
}

// renewedLease records a successful renewal of id, and returns its revoked
// channel. A lease this store did not grant is tracked from then on.
// revoked is the channel the caller had: if it is closed, this store
// revoked the lease while the renewal was on its way back (etcd renewed it
// just before), and renewedLease reports false, tracking nothing: the
// entry must not come back to life with a channel nobody closes.
func (s *Store) renewedLease(id storage.LeaseID, ttl time.Duration, validUntil time.Time, revoked <-chan struct{}) (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if revoked != nil {
		select {
		case <-revoked:
			return nil, false
		default:
		}
	}
	ls := s.leases[id]
	if ls == nil {
		ls = &leaseState{revoked: make(chan struct{})}
		s.leases[id] = ls
	}
	ls.ttl, ls.validUntil = ttl, validUntil
	return ls.revoked, true
}

// forgetLease drops what the store knows of id, and ends the KeepAlive
// calls of id if revoked.
func (s *Store) forgetLease(id storage.LeaseID, revoked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls := s.leases[id]; ls != nil {
		delete(s.leases, id)
		if revoked {
			close(ls.revoked)
		}
	}
}

// unknownLeaseTimeout bounds the first renewal of a lease this store did
// not grant, whose TTL it does not know yet.
const unknownLeaseTimeout = 5 * time.Second

// renewRetry is the pause between failed renewals: a tenth of the TTL
// (several tries before the lease can lapse), within bounds.
func renewRetry(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// KeepAlive implements storage.Store with one KeepAliveOnce request every
// third of the TTL, not the client's keepalive stream: the stream's
// responses do not say when their request was sent, and a lower bound on
// the lease's expiry needs exactly that. Each request gets a third of the
// TTL to succeed; failed ones (etcd unreachable, no leader) are retried
// until validUntil passes, and then the lease counts as lost: etcd may have
// expired it, and another node may claim its partitions.
//
// The requests do not require a leader (clientv3.WithRequireLeader): a
// member without one holds a renewal until one is elected or the attempt's
// timeout passes, which is the wait wanted here, where a request failing
// fast would just be retried.
func (s *Store) KeepAlive(ctx context.Context, lease storage.LeaseID, renewed func(validUntil time.Time)) error {
	id := clientv3.LeaseID(lease)
	lost := func(why string) error {
		s.forgetLease(lease, false)
		return fmt.Errorf("%w: lease %x %s", storage.ErrLeaseNotFound, int64(lease), why)
	}
	revoked, ttl, validUntil := s.lease(lease)
	known := !validUntil.IsZero()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return storage.ErrClosed
		case <-revoked:
			return lost("revoked")
		case <-t.C:
		}
		now := time.Now()
		if known && !now.Before(validUntil) {
			return lost("not renewed before it could expire: etcd unreachable or without a leader")
		}
		timeout := unknownLeaseTimeout
		if known {
			timeout = min(ttl/3, validUntil.Sub(now))
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		resp, err := s.cli.KeepAliveOnce(rctx, id)
		cancel()
		if err == nil {
			s.observe(resp.ResponseHeader.GetRaftTerm())
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case s.isClosed():
			return storage.ErrClosed
		case err == nil:
			ttl = time.Duration(resp.TTL) * time.Second
			validUntil, known = sent.Add(ttl), true
			var ok bool
			if revoked, ok = s.renewedLease(lease, ttl, validUntil, revoked); !ok {
				return lost("revoked")
			}
			if renewed != nil {
				renewed(validUntil)
			}
			t.Reset(time.Until(sent.Add(ttl / 3)))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return lost("expired or revoked")
		case s.cli.Ctx().Err() != nil:
			return storage.ErrClosed
		case !known:
			return lost(fmt.Sprintf("unknown to this store, and its renewal failed: %v", err))
		default:
			t.Reset(min(renewRetry(ttl), time.Until(validUntil)))
		}
	}
}

// RevokeLease implements storage.Store.
func (s *Store) RevokeLease(ctx context.Context, lease storage.LeaseID) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	_, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease))
	if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.forgetLease(lease, true)
		return nil
	}
	return mapErr(err)
}

// leaseAlive returns ErrLeaseNotFound if lease is gone. etcd gives the
// time left in whole seconds, rounded down, and -1 for a lease it does not
// have: 0 is a lease with under a second left, alive (taken for gone, a
// node with a short TTL, or renewals a little late, was told it had lost
// the lease it held).
func (s *Store) leaseAlive(ctx context.Context, lease storage.LeaseID) error {
	resp, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return mapErr(err)
	}
	if resp.TTL < 0 {
		return fmt.Errorf("%w: %x", storage.ErrLeaseNotFound, int64(lease))
	}
	return nil
}

// Claim implements storage.Store with txns of up to MaxTxnOps partitions:
//
//	If(CreateRevision(owner key) == 0 for each) Then(Put(owner key, node, lease) for each) Else(Get of each)
//
// A txn that fails wrote nothing; its Else reads say which partitions are
// owned, and the rest are tried again. A claim's token is the revision of
// the txn that made it, which is its owner key's create revision. If no
// partition was free, the lease is checked so that a lost lease is still
// reported. On error, the claims already made are returned with it.
func (s *Store) Claim(ctx context.Context, node string, lease storage.LeaseID, partitions []uint32) ([]storage.Claim, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if lease == 0 {
		return nil, noLease()
	}
	if err := s.spaceLeft(ctx); err != nil {
		return nil, err
	}
	todo := slices.Clone(partitions)
	slices.Sort(todo)
	todo = slices.Compact(todo)
	var out []storage.Claim
	for len(todo) > 0 {
		batch := todo[:min(len(todo), s.limits.MaxTxnOps)]
		cmps := make([]clientv3.Cmp, len(batch))
		puts := make([]clientv3.Op, len(batch))
		gets := make([]clientv3.Op, len(batch))
		for i, p := range batch {
			k := storage.OwnerKey(p)
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
			puts[i] = clientv3.OpPut(k, node, clientv3.WithLease(clientv3.LeaseID(lease)))
			gets[i] = clientv3.OpGet(k, clientv3.WithKeysOnly())
		}
		tctx, end := s.begin(ctx)
		resp, err := s.kv.Txn(tctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		if err := end(err); err != nil {
			return out, err
		}
		s.observe(resp.Header.GetRaftTerm())
		if resp.Succeeded {
			for _, p := range batch {
				out = append(out, storage.Claim{Partition: p, Node: node, Token: resp.Header.Revision, Lease: lease})
			}
			todo = todo[len(batch):]
			continue
		}
		var free []uint32
		for i, p := range batch {
			if len(resp.Responses[i].GetResponseRange().GetKvs()) == 0 {
				free = append(free, p)
			}
		}
		todo = append(free, todo[len(batch):]...)
	}
	if len(out) == 0 {
		if err := s.leaseAlive(ctx, lease); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Release implements storage.Store.
func (s *Store) Release(ctx context.Context, c storage.Claim) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	k := storage.OwnerKey(c.Partition)
	ctx, end := s.begin(ctx)
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", c.Token)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err := end(err); err != nil {
		return 0, err
	}
	s.observe(resp.Header.GetRaftTerm())
	if !resp.Succeeded {
		return 0, nil
	}
	// A write txn's header revision is the one it wrote at.
	return resp.Header.GetRevision(), nil
}

// Claims implements storage.Store.
func (s *Store) Claims(ctx context.Context) ([]storage.Claim, error) {
	kvs, err := s.List(ctx, storage.OwnersPrefix, storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]storage.Claim, 0, len(kvs))
	for _, kv := range kvs {
		p, ok := storage.ParseOwnerKey(kv.Key)
		if !ok {
			continue
		}
		out = append(out, storage.Claim{Partition: p, Node: string(kv.Value), Token: kv.CreateRevision, Lease: kv.Lease})
	}
	slices.SortFunc(out, func(a, b storage.Claim) int { return cmp.Compare(a.Partition, b.Partition) })
	return out, nil
}

// Close implements storage.Store: later calls fail with storage.ErrClosed,
// and KeepAlive and Watch calls end with it. The client stays open.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.probeCancel != nil {
			s.probeCancel()
		}
	})
	s.bg.Wait()
	return nil
}

// watchBuffer is the buffer of a Watch channel: enough to absorb a burst
// while the reader works, small enough that a stalled reader holds up only
// its own watch (the client buffers what etcd sends meanwhile).
const watchBuffer = 16

// Watch implements storage.Store over one etcd watch.
//
// The watch requires a leader (clientv3.WithRequireLeader): without it, a
// watch served by a member cut off from the leader stalls silently, and a
// mirror of owners/ would route by a stale table with nothing to tell it
// so. With it, etcd cancels the watch once its member has no leader, and
// the response carries that error (not ErrCompacted), so the watcher
// re-lists, which fails until a leader is back: stale, but knowingly.
// etcd checks it in its gRPC server, though: a client of a member in this
// process (Embedded.Client, which a node with an embedded member uses)
// does not pass there, and its watches stall until a leader is back, as
// without the option.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan storage.WatchResponse {
	out := make(chan storage.WatchResponse, watchBuffer)
	go s.watch(ctx, prefix, fromRev, out)
	return out
}

func (s *Store) watch(ctx context.Context, prefix string, fromRev int64, out chan<- storage.WatchResponse) {
	defer close(out)
	send := func(r storage.WatchResponse) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if err := s.check(ctx); err != nil {
		if ctx.Err() == nil {
			send(storage.WatchResponse{Err: err})
		}
		return
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The namespace wrapper of the client is not used: it adds a goroutine
	// and a channel per watch to do what two lines do here.
	key, opts := s.prefix+prefix, []clientv3.OpOption{clientv3.WithRev(max(fromRev, 0))}
	if key == "" {
		key, opts = "\x00", append(opts, clientv3.WithFromKey())
	} else {
		opts = append(opts, clientv3.WithPrefix())
	}
	wch := s.cli.Watch(wctx, key, opts...)
	for {
		var (
			wr clientv3.WatchResponse
			ok bool
		)
		select {
		case <-ctx.Done():
			return
		case <-s.closed:
			send(storage.WatchResponse{Err: storage.ErrClosed})
			return
		case wr, ok = <-wch:
		}
		if ctx.Err() != nil {
			return
		}
		if !ok {
			// The client closes the channel without a response when it is
			// closed itself, or when it gave up handing over the error
			// that ended the watch because this goroutine was busy sending.
			err := errors.New("etcdstore: watch ended by the client")
			if s.cli.Ctx().Err() != nil {
				err = storage.ErrClosed
			}
			send(storage.WatchResponse{Err: err})
			return
		}
		if err := wr.Err(); err != nil {
			if wr.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
				err = fmt.Errorf("%w: watch from revision %d, etcd compacted up to %d", storage.ErrCompacted, fromRev, wr.CompactRevision)
			} else {
				err = fmt.Errorf("etcdstore: watch %q: %w", prefix, err)
			}
			send(storage.WatchResponse{Err: err})
			return
		}
		if len(wr.Events) == 0 {
			continue // a progress notification, or the watch's creation
		}
		r := storage.WatchResponse{Events: make([]storage.Event, len(wr.Events))}
		for i, ev := range wr.Events {
			key := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
			if ev.Type == mvccpb.DELETE {
				r.Events[i] = storage.Event{Type: storage.EventDelete, KV: storage.KV{Key: key, ModRevision: ev.Kv.ModRevision}}
				continue
			}
			kv := toKV(ev.Kv, false)
			kv.Key = key
			r.Events[i] = storage.Event{Type: storage.EventPut, KV: kv}
		}
		// Not the header's revision: while etcd catches a watcher up over
		// more than 1000 revisions, each batch carries the store's current
		// revision, ahead of what the batch delivers. The last event's
		// revision never overstates.
		r.Revision = r.Events[len(r.Events)-1].KV.ModRevision
		if !send(r) {
			return
		}
	}
}
