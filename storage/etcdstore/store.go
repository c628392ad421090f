package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/storage"
)

// DefaultPrefix is the namespace of a rivet cluster's keys in etcd.
const DefaultPrefix = "/rivet/"

// Store is a storage.Store over etcd. Its methods make one etcd request
// each, except Claim (one per batch of partitions) and KeepAlive.
type Store struct {
	cli    *clientv3.Client
	kv     clientv3.KV // namespaced: keys are relative to the prefix
	limits storage.Limits

	closeOnce sync.Once
	closed    chan struct{}
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
		limits: storage.DefaultLimits(),
		closed: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.limits.MaxTxnOps <= 0 || s.limits.MaxTxnBytes <= 0 {
		return nil, fmt.Errorf("etcdstore: bad limits %+v", s.limits)
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
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	start, end := prefix, rangeEnd(prefix)
	if opts.StartAfter != "" && opts.StartAfter+"\x00" > start {
		start = opts.StartAfter + "\x00"
	}
	if end != "\x00" && start >= end {
		return nil, nil
	}
	ops := []clientv3.OpOption{withEnd(end)}
	if opts.Limit > 0 {
		ops = append(ops, clientv3.WithLimit(int64(opts.Limit)))
	}
	if opts.KeysOnly {
		ops = append(ops, clientv3.WithKeysOnly())
	}
	resp, err := s.kv.Get(ctx, start, ops...)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]storage.KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = toKV(kv, opts.KeysOnly)
	}
	return out, nil
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
//	   CreateRevision(key) == 0 for CondAbsent, > 0 for CondPresent)
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
	var (
		fences []storage.Fence
		cmps   []clientv3.Cmp
		thens  []clientv3.Op
		elses  []clientv3.Op
	)
	for i := range txns {
		t := &txns[i]
		if f := t.Fence; f.Token != 0 && !slices.Contains(fences, f) {
			fences = append(fences, f)
			k := storage.OwnerKey(f.Partition)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", f.Token))
			elses = append(elses, clientv3.OpGet(k, clientv3.WithKeysOnly()))
		}
		for _, c := range t.Conds {
			switch c.Kind {
			case storage.CondAbsent:
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.Key), "=", 0))
			case storage.CondPresent:
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.Key), ">", 0))
			default:
				return fmt.Errorf("%w: unknown cond kind %d", storage.ErrInvalidTxn, c.Kind)
			}
		}
		for _, o := range t.Ops {
			switch o.Kind {
			case storage.OpPut:
				thens = append(thens, clientv3.OpPut(o.Key, string(o.Value)))
			case storage.OpDelete:
				thens = append(thens, clientv3.OpDelete(o.Key))
			case storage.OpDeletePrefix:
				thens = append(thens, clientv3.OpDelete(o.Key, withEnd(rangeEnd(o.Key))))
			default:
				return fmt.Errorf("%w: unknown op kind %d", storage.ErrInvalidTxn, o.Kind)
			}
		}
	}
	if len(cmps) == 0 && len(thens) == 0 {
		return nil
	}
	resp, err := s.kv.Txn(ctx).If(cmps...).Then(thens...).Else(elses...).Commit()
	if err != nil {
		return mapErr(err)
	}
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
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, false, mapErr(err)
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

// PutLeased implements storage.Store.
func (s *Store) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", storage.ErrInvalidTxn)
	}
	_, err := s.kv.Put(ctx, key, string(value), clientv3.WithLease(clientv3.LeaseID(lease)))
	return mapErr(err)
}

// GrantLease implements storage.Store. etcd keeps TTLs in whole seconds
// (rounded up here) and raises them to its minimum (1.5 election
// timeouts, 2 s with the default timing).
func (s *Store) GrantLease(ctx context.Context, ttl time.Duration) (storage.LeaseID, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, mapErr(err)
	}
	return storage.LeaseID(resp.ID), nil
}

// KeepAlive implements storage.Store over the client's keepalive stream,
// which renews every third of the TTL. The stream's channel closes when the
// lease is gone or when no renewal arrived for a whole TTL; then the lease's
// TTL on the server decides. If the server cannot be asked either, the
// lease is taken as lost: it was not renewed for its TTL, so etcd may
// already have expired it.
func (s *Store) KeepAlive(ctx context.Context, lease storage.LeaseID) error {
	id := clientv3.LeaseID(lease)
	lost := func(why string) error {
		return fmt.Errorf("%w: lease %x %s", storage.ErrLeaseNotFound, int64(lease), why)
	}
	for {
		if err := s.check(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		started := time.Now()
		kctx, cancel := context.WithCancel(ctx)
		ch, err := s.cli.KeepAlive(kctx, id)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return mapErr(err)
		}
		closed := false
		for !closed {
			select {
			case _, ok := <-ch:
				closed = !ok
			case <-s.closed:
				cancel()
				return storage.ErrClosed
			}
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := s.cli.TimeToLive(tctx, id)
		tcancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && resp.TTL <= 0, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return lost("expired or revoked")
		case err != nil:
			if s.cli.Ctx().Err() != nil {
				return storage.ErrClosed
			}
			return lost(fmt.Sprintf("not renewed within its TTL (%v)", err))
		}
		// Alive after all (the stream broke and recovered): renew again,
		// but not in a tight loop.
		if d := time.Since(started); d < 100*time.Millisecond {
			t := time.NewTimer(100*time.Millisecond - d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// RevokeLease implements storage.Store.
func (s *Store) RevokeLease(ctx context.Context, lease storage.LeaseID) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	_, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return mapErr(err)
}

// leaseAlive returns ErrLeaseNotFound if lease is gone.
func (s *Store) leaseAlive(ctx context.Context, lease storage.LeaseID) error {
	resp, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return mapErr(err)
	}
	if resp.TTL <= 0 {
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
		resp, err := s.kv.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		if err != nil {
			return out, mapErr(err)
		}
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
func (s *Store) Release(ctx context.Context, c storage.Claim) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	k := storage.OwnerKey(c.Partition)
	_, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", c.Token)).
		Then(clientv3.OpDelete(k)).
		Commit()
	return mapErr(err)
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

// Close implements storage.Store: later calls fail with storage.ErrClosed
// and KeepAlive calls return it. The client stays open.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
