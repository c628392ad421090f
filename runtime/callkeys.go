package runtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
)

// Idempotent calls: a call that carries an idempotency key records the key,
// a digest of the call and its result with the action's change, in one
// transaction, so that the same call sent again with the key (a client
// retrying a call whose outcome it did not learn, a workflow step run again
// after a crash) gets the first one's result and runs nothing. As with
// sends, an actor keeps its last callKeysKept keys, each for callKeysWindow.
// A call that failed records nothing (its changes were discarded): sent
// again, it runs again. A result over maxKeptCallResult is not kept: the
// call sent again is told that it ran.
var (
	callKeysKept   = 1024
	callKeysWindow = 24 * time.Hour
)

// maxKeptCallResult bounds a kept result, as a kept completion's.
const maxKeptCallResult = 64 << 10

// callKeyRecord is what a call's key records.
type callKeyRecord struct {
	At int64 `json:"at"` // unix ms
	// Sum digests the action and its arguments (as sendSums does a
	// message): the same key with another call is the caller's mistake.
	Sum string `json:"sum"`
	// Kept says that the result is kept, under CallResultSuffix.
	Kept bool `json:"kept,omitempty"`
	// Seq orders the records, for the drop of the oldest.
	Seq uint64 `json:"seq"`

	// version is the enqueue that wrote the record, in this activation
	// (0: read from storage, durable).
	version uint64
}

func callKeyKey(prefix, key string) string {
	return prefix + storage.CallKeySuffix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

func callResultKey(prefix, key string) string {
	return prefix + storage.CallResultSuffix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// callSum digests a call: its action and its arguments as sendSums does a
// message's body (a retry may build its JSON anew).
func callSum(action string, args json.RawMessage) string {
	if len(args) == 0 {
		args = json.RawMessage("[]")
	}
	_, same := sendSums(action, args)
	return same
}

// loadCallKeys reads the actor's call keys the first time a keyed call
// needs them. Called by the turn holder.
func (a *activation) loadCallKeys(ctx context.Context) error {
	if a.callKeys != nil {
		return nil
	}
	kvs, err := a.h.store.List(ctx, a.prefix+storage.CallKeySuffix, storage.ListOptions{})
	if err != nil {
		return rivet.Errorf(rivet.ErrUnavailable, "%s: read its call idempotency keys: %v", a.describe(), err)
	}
	keys := make(map[string]callKeyRecord, len(kvs))
	var next uint64
	for _, kv := range kvs {
		k, err := base64.RawURLEncoding.DecodeString(kv.Key[len(a.prefix)+len(storage.CallKeySuffix):])
		var rec callKeyRecord
		if err != nil || json.Unmarshal(kv.Value, &rec) != nil {
			continue // not one of ours: left alone
		}
		keys[string(k)] = rec
		next = max(next, rec.Seq+1)
	}
	a.callKeys, a.callKeysNext = keys, next
	a.callKeysRunning = map[string]bool{}
	return nil
}

// calledBefore returns the result of the call key recorded, if one within
// the window did: its result, once what recorded it is durable. dup is
// false if no call within the window used key.
func (a *activation) calledBefore(ctx context.Context, key, sum string, now time.Time) (result json.RawMessage, dup bool, err error) {
	rec, ok := a.callKeys[key]
	if !ok || now.Sub(time.UnixMilli(rec.At)) > callKeysWindow {
		return nil, false, nil
	}
	if rec.Sum != sum {
		return nil, true, rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another call (a different action or arguments): use a new key for a new call", key, a.describe())
	}
	// Recorded by a turn whose commit may still be in flight: answered
	// only once it is durable. If it fails, the actor loads again,
	// without the record, and this call, which ran nothing, is sent
	// again (UNAVAILABLE) to run.
	if rec.version != 0 {
		if err := a.waitCommitted(ctx, rec.version); err != nil {
			return nil, true, rivet.Errorf(rivet.ErrUnavailable, "%s: the first call with idempotency key %q is not durable yet, and this one ran nothing; retry (%v)", a.describe(), key, err)
		}
	}
	if !rec.Kept {
		return nil, true, rivet.Errorf(rivet.ErrFailedPrecondition, "the call with idempotency key %q of %s ran already, at %s; its result was too large to keep (over %d bytes)", key, a.describe(), time.UnixMilli(rec.At).UTC().Format(time.RFC3339), maxKeptCallResult)
	}
	kv, err := a.h.store.Get(ctx, callResultKey(a.prefix, key))
	if err != nil {
		// Not found too: the record and its result are written and
		// deleted together, so storage is not as memory says.
		return nil, true, rivet.Errorf(rivet.ErrUnavailable, "%s: read the result of the call with idempotency key %q: %v", a.describe(), key, err)
	}
	return kv.Value, true, nil
}

// recordCallKey returns the ops that record key with result, and the keys
// they drop: expired ones (at most maxExpiredDrops a call), and the oldest
// to keep callKeysKept; keptCallKey applies them to memory once they are
// enqueued. One pass over the keys, whatever their number.
func (a *activation) recordCallKey(key, sum string, result json.RawMessage, now time.Time) (rec callKeyRecord, ops []storage.Op, dropped []string) {
	rec = callKeyRecord{At: now.UnixMilli(), Sum: sum, Kept: len(result) <= maxKeptCallResult, Seq: a.callKeysNext}
	b, _ := json.Marshal(rec)
	ops = append(ops, storage.Put(callKeyKey(a.prefix, key), b))
	if rec.Kept {
		ops = append(ops, storage.Put(callResultKey(a.prefix, key), result))
	} else {
		ops = append(ops, storage.Delete(callResultKey(a.prefix, key)))
	}
	drop := func(k string) {
		dropped = append(dropped, k)
		ops = append(ops, storage.Delete(callKeyKey(a.prefix, k)), storage.Delete(callResultKey(a.prefix, k)))
	}
	oldest, found := "", false
	for k, r := range a.callKeys {
		if k == key {
			continue // written over
		}
		if now.Sub(time.UnixMilli(r.At)) > callKeysWindow && len(dropped) < maxExpiredDrops {
			drop(k)
			continue
		}
		if !found || r.Seq < a.callKeys[oldest].Seq {
			oldest, found = k, true
		}
	}
	kept := len(a.callKeys) - len(dropped)
	if _, ok := a.callKeys[key]; !ok {
		kept++
	}
	if kept > callKeysKept && found {
		drop(oldest)
	}
	return rec, ops, dropped
}

// maxExpiredDrops bounds the expired keys one call drops: their deletes
// go in its transaction.
const maxExpiredDrops = 16

// keptCallKey applies recordCallKey's ops, enqueued as version, to memory.
func (a *activation) keptCallKey(key string, rec callKeyRecord, dropped []string, version uint64) {
	now := time.Now()
	for _, k := range dropped {
		if now.Sub(time.UnixMilli(a.callKeys[k].At)) <= callKeysWindow {
			a.h.callKeysEvicted.Add(1)
		}
		delete(a.callKeys, k)
	}
	rec.version = version
	a.callKeys[key] = rec
	a.callKeysNext = max(a.callKeysNext, rec.Seq+1)
}
