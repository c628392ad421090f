package etcdstore

import (
	"context"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/storage"
)

// WithKVClient makes Commit send its transactions to kc, etcd's KV API
// itself (clientv3.RetryKVClient of a client, or Embedded.KVClient), with
// the request built directly: one buffer for every key, the values as
// they are, the ops in a few slices. Through clientv3's transaction
// builder each op was a clientv3.Op (its value copied into a string),
// then a request op (the key and value copied back into bytes, and three
// small objects): about a tenth of what a node allocated per workflow
// step, all of it work for the garbage collector.
func WithKVClient(kc pb.KVClient) Option { return func(s *Store) { s.raw = kc } }

// commitRaw is Commit over s.raw: the same transaction (see Commit).
func (s *Store) commitRaw(ctx context.Context, txns []storage.Txn) error {
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
			switch c.Kind {
			case storage.CondAbsent:
				req.Compare = append(req.Compare, createRev(c.Key, pb.Compare_EQUAL, 0))
			case storage.CondPresent:
				req.Compare = append(req.Compare, createRev(c.Key, pb.Compare_GREATER, 0))
			default:
				return fmt.Errorf("%w: unknown cond kind %d", storage.ErrInvalidTxn, c.Kind)
			}
		}
		for _, o := range t.Ops {
			switch o.Kind {
			case storage.OpPut:
				// The value is sent as it is: the request is encoded
				// (for the wire, or for raft in process) before Txn
				// returns, and a write group's values are not changed.
				puts = append(puts, pb.PutRequest{Key: key(o.Key), Value: o.Value})
				wraps = append(wraps, pb.RequestOp_RequestPut{RequestPut: &puts[len(puts)-1]})
				ops = append(ops, pb.RequestOp{Request: &wraps[len(wraps)-1]})
			case storage.OpDelete:
				ops = append(ops, pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
					RequestDeleteRange: &pb.DeleteRangeRequest{Key: key(o.Key)}}})
			case storage.OpDeletePrefix:
				k := key(o.Key)
				ops = append(ops, pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
					RequestDeleteRange: &pb.DeleteRangeRequest{Key: k, RangeEnd: []byte(rangeEnd(string(k)))}}})
			default:
				return fmt.Errorf("%w: unknown op kind %d", storage.ErrInvalidTxn, o.Kind)
			}
			req.Success = append(req.Success, &ops[len(ops)-1])
		}
	}
	if len(req.Compare) == 0 && len(req.Success) == 0 {
		return nil
	}
	ctx, end := s.begin(ctx)
	resp, err := s.raw.Txn(ctx, req)
	if err := end(clientv3.ContextError(ctx, err)); err != nil {
		return err
	}
	return s.committed(resp, fences)
}
