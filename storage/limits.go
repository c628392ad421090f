package storage

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultLimits are etcd's default bounds (--max-txn-ops 128,
// --max-request-bytes 1.5 MiB), with a byte margin for what Txn.Size does not
// count: the store's key prefix, protobuf framing and the Else branch that
// reads back the fenced owner keys.
func DefaultLimits() Limits {
	return Limits{MaxTxnOps: 128, MaxTxnBytes: 1468006} // 1.4 MiB
}

// fenceBytes is what one distinct fence adds to a packed transaction: its
// compare and the read of the owner key when the compares fail.
func fenceBytes(p uint32) int {
	// len(OwnerKey(p)) without making the key: this runs for every txn a
	// Committer is given. appendPartition pads to five digits.
	var buf [10]byte
	digits := max(len(strconv.AppendUint(buf[:0], uint64(p), 10)), 5)
	return 2 * (len(OwnersPrefix) + digits + 16)
}

// Check returns ErrTooLarge (wrapped, with the figures) if txns packed into
// one store transaction exceed l. Identical fences are counted once, as the
// stores send them once.
func (l Limits) Check(txns ...Txn) error {
	var fences []Fence
	compares, ops, size := 0, 0, 0
	for i := range txns {
		t := &txns[i]
		if t.Fence.Token != 0 && !containsFence(fences, t.Fence) {
			fences = append(fences, t.Fence)
			compares++
			size += fenceBytes(t.Fence.Partition)
		}
		compares += len(t.Conds)
		ops += len(t.Ops)
		size += t.Size()
	}
	if compares > l.MaxTxnOps || ops > l.MaxTxnOps || size > l.MaxTxnBytes {
		return fmt.Errorf("%w: %d compares, %d writes, %d bytes (limits: %d compares or writes, %d bytes)",
			ErrTooLarge, compares, ops, size, l.MaxTxnOps, l.MaxTxnBytes)
	}
	return nil
}

func containsFence(fs []Fence, f Fence) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// checkTxns returns ErrInvalidTxn if txns, packed into one store
// transaction, would be refused by etcd: a key put twice, or put under a
// delete (point or prefix) of the same transaction. Overlapping deletes are
// allowed, as etcd allows them. It also rejects empty keys and unknown kinds.
func checkTxns(txns []Txn) error {
	for i := range txns {
		if err := checkKinds(&txns[i]); err != nil {
			return err
		}
	}
	if len(txns) == 1 && len(txns[0].Ops) <= smallTxnOps {
		return putConflictsPairwise(txns[0].Ops)
	}
	return putConflictsByMaps(txns)
}

// checkKinds rejects t's unknown cond and op kinds and empty keys.
func checkKinds(t *Txn) error {
	for _, c := range t.Conds {
		if c.Kind != CondAbsent && c.Kind != CondPresent && c.Kind != CondUnchanged {
			return fmt.Errorf("%w: unknown cond kind %d", ErrInvalidTxn, c.Kind)
		}
		if c.Key == "" {
			return fmt.Errorf("%w: empty cond key", ErrInvalidTxn)
		}
	}
	for _, o := range t.Ops {
		switch o.Kind {
		case OpPut, OpDelete:
			if o.Key == "" {
				return fmt.Errorf("%w: empty key", ErrInvalidTxn)
			}
		case OpDeletePrefix:
		default:
			return fmt.Errorf("%w: unknown op kind %d", ErrInvalidTxn, o.Kind)
		}
	}
	return nil
}

// putConflictsByMaps finds a key put twice, or put under a delete, among
// the ops of txns (of known kinds).
func putConflictsByMaps(txns []Txn) error {
	puts := map[string]struct{}{}
	dels := map[string]struct{}{}
	var prefixes []string
	for i := range txns {
		for _, o := range txns[i].Ops {
			switch o.Kind {
			case OpPut:
				if _, dup := puts[o.Key]; dup {
					return fmt.Errorf("%w: key %q put twice", ErrInvalidTxn, o.Key)
				}
				puts[o.Key] = struct{}{}
			case OpDelete:
				dels[o.Key] = struct{}{}
			case OpDeletePrefix:
				prefixes = append(prefixes, o.Key)
			}
		}
	}
	for k := range puts {
		if _, ok := dels[k]; ok {
			return fmt.Errorf("%w: key %q put and deleted", ErrInvalidTxn, k)
		}
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return fmt.Errorf("%w: key %q put under deleted prefix %q", ErrInvalidTxn, k, p)
			}
		}
	}
	return nil
}

// smallTxnOps is the size up to which putConflictsPairwise compares ops
// pairwise rather than through maps: an actor's commit is a few ops (a
// workflow step's entry and state), checked once per commit, and two maps
// made for each were about 4% of what a node allocated per workflow step.
const smallTxnOps = 16

// putConflictsPairwise is putConflictsByMaps for the ops of one txn,
// compared pairwise.
func putConflictsPairwise(ops []Op) error {
	for i, o := range ops {
		if o.Kind != OpPut {
			continue
		}
		for j, p := range ops {
			switch {
			case j == i:
			case p.Kind == OpPut && p.Key == o.Key:
				return fmt.Errorf("%w: key %q put twice", ErrInvalidTxn, o.Key)
			case p.Kind == OpDelete && p.Key == o.Key:
				return fmt.Errorf("%w: key %q put and deleted", ErrInvalidTxn, o.Key)
			case p.Kind == OpDeletePrefix && strings.HasPrefix(o.Key, p.Key):
				return fmt.Errorf("%w: key %q put under deleted prefix %q", ErrInvalidTxn, o.Key, p.Key)
			}
		}
	}
	return nil
}
