package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/rivet-go/rivet/storage"
)

// WithKVClient makes Commit send its transactions to kc, etcd's KV API
// itself: Embedded.KVClient for a member in this process (whose client has
// no connection to take it from), or ClientKV's for a client of etcd's
// endpoints with message bounds of its own. Without it, a client of
// etcd's endpoints gives its own, with WaitForReady.
//
// Commit builds the request directly: one buffer for every key, the
// values as they are, the ops in a few slices. Through clientv3's
// transaction builder each op was a clientv3.Op (its value copied into a
// string), then a request op (the key and value copied back into bytes,
// and three small objects): about a tenth of what a node allocated per
// workflow step, all of it work for the garbage collector.
//
// opts go with every Txn: clientv3 sends its requests with call options of
// its own, which a pb.KVClient does not add.
func WithKVClient(kc pb.KVClient, opts ...grpc.CallOption) Option {
	return func(s *Store) { s.raw, s.rawOpts = kc, opts }
}

// ClientKV returns cli's KV API for WithKVClient, with the call options
// clientv3 would send: wait for a connection rather than fail at once (an
// unreachable etcd is waited out within the caller's deadline, not turned
// into writes of unknown outcome), and these message bounds. cli must be a
// client of etcd's endpoints (clientv3.New); a member in this process has
// Embedded.KVClient.
func ClientKV(cli *clientv3.Client, maxSend, maxRecv int) (pb.KVClient, []grpc.CallOption, error) {
	if cli.ActiveConnection() == nil {
		return nil, nil, errors.New("etcdstore: ClientKV needs a client of etcd's endpoints (clientv3.New)")
	}
	return clientv3.RetryKVClient(cli), []grpc.CallOption{
		grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(maxSend), grpc.MaxCallRecvMsgSize(maxRecv),
	}, nil
}

// commit builds Commit's transaction as etcd's request and sends it to
// s.raw.
func (s *Store) commit(ctx context.Context, txns []storage.Txn) error {
	nOps, nPuts, keyBytes := 0, 0, 0
	for i := range txns {
		nOps += len(txns[i].Ops)
		for _, o := range txns[i].Ops {
			keyBytes += len(s.prefix) + len(o.Key)
			if o.Kind == storage.OpPut {
				nPuts++
			}
		}
	}
	// Every op's key is cut from keys, whose capacity is exact: it never
	// grows, so the keys cut earlier stay valid.
	keys := make([]byte, 0, keyBytes)
	key := func(k string) []byte {
		start := len(keys)
		keys = append(append(keys, s.prefix...), k...)
		return keys[start:len(keys):len(keys)]
	}
	var (
		fences []storage.Fence
		req    = &pb.TxnRequest{Success: make([]*pb.RequestOp, 0, nOps)}
		ops    = make([]pb.RequestOp, 0, nOps)
		puts   = make([]pb.PutRequest, 0, nPuts)
		wraps  = make([]pb.RequestOp_RequestPut, 0, nPuts)
	)
	createRev := func(k string, result pb.Compare_CompareResult, rev int64) *pb.Compare {
		return &pb.Compare{Result: result, Target: pb.Compare_CREATE, Key: []byte(s.prefix + k),
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
	}
	for i := range txns {
		t := &txns[i]
		if f := t.Fence; f.Token != 0 && !slices.Contains(fences, f) {
			fences = append(fences, f)
			k := storage.OwnerKey(f.Partition)
			req.Compare = append(req.Compare, createRev(k, pb.Compare_EQUAL, f.Token))
			req.Failure = append(req.Failure, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{
				RequestRange: &pb.RangeRequest{Key: []byte(s.prefix + k), KeysOnly: true}}})
		}
		for _, c := range t.Conds {
			if c.Key == "" {
				return fmt.Errorf("%w: empty cond key", storage.ErrInvalidTxn)
			}
			switch c.Kind {
			case storage.CondAbsent:
				req.Compare = append(req.Compare, createRev(c.Key, pb.Compare_EQUAL, 0))
			case storage.CondPresent:
				req.Compare = append(req.Compare, createRev(c.Key, pb.Compare_GREATER, 0))
			case storage.CondUnchanged:
				req.Compare = append(req.Compare, &pb.Compare{Result: pb.Compare_EQUAL, Target: pb.Compare_MOD, Key: []byte(s.prefix + c.Key),
					TargetUnion: &pb.Compare_ModRevision{ModRevision: c.Rev}})
			default:
				return fmt.Errorf("%w: unknown cond kind %d", storage.ErrInvalidTxn, c.Kind)
			}
		}
		for _, o := range t.Ops {
			// An empty key is the prefix itself to etcd, which takes it:
			// a key outside every List and Watch of the namespace. (A
			// prefix delete of "" is the whole namespace, as it should.)
			if o.Key == "" && o.Kind != storage.OpDeletePrefix {
				return fmt.Errorf("%w: empty key", storage.ErrInvalidTxn)
			}
			switch o.Kind {
			case storage.OpPut:
				// The value is sent as it is, not copied: Commit's
				// callers leave an op's value unchanged (storage.Op),
				// and nothing keeps the request once Txn returns.
				puts = append(puts, pb.PutRequest{Key: key(o.Key), Value: o.Value})
				wraps = append(wraps, pb.RequestOp_RequestPut{RequestPut: &puts[len(puts)-1]})
				ops = append(ops, pb.RequestOp{Request: &wraps[len(wraps)-1]})
			case storage.OpDelete:
				ops = append(ops, pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
					RequestDeleteRange: &pb.DeleteRangeRequest{Key: key(o.Key)}}})
			case storage.OpDeletePrefix:
				k := key(o.Key)
				end := []byte(rangeEnd(string(k)))
				if len(k) == 0 {
					// Everything: etcd wants a key, and "\x00" to the end
					// is what clientv3's WithFromKey sends.
					k = []byte{0}
				}
				ops = append(ops, pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
					RequestDeleteRange: &pb.DeleteRangeRequest{Key: k, RangeEnd: end}}})
			default:
				return fmt.Errorf("%w: unknown op kind %d", storage.ErrInvalidTxn, o.Kind)
			}
			req.Success = append(req.Success, &ops[len(ops)-1])
		}
	}
	if len(req.Compare) == 0 && len(req.Success) == 0 {
		return nil
	}
	if nPuts > 0 {
		// etcd out of space still applies deletes.
		if err := s.spaceLeft(ctx); err != nil {
			return err
		}
	}
	ctx, end := s.begin(ctx)
	resp, err := s.raw.Txn(ctx, req, s.rawOpts...)
	if err := end(clientv3.ContextError(ctx, err)); err != nil {
		return err
	}
	return s.committed(resp, fences)
}
