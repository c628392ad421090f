package runtime

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/optjson"
	"github.com/rivet-go/rivet/storage"
)

// Idempotent sends: a send that carries an idempotency key records the key
// with its message, in the message's own transaction, so that the same
// key sent again (a client retrying a send whose outcome it did not learn)
// queues nothing and gets the first message's ID. An actor keeps its last
// sendKeysKept keys, each for sendKeysWindow: enough for any retry, and a
// bound on what an actor stores and reads.
//
// The completion of a keyed message is kept too, for as long as its key
// (under sendResponseKey, written in the commit that records the
// completion and deleted with the key): a waiting send retried after the
// completion gets it, as a Temporal Update retried with its update ID
// does. A retry that comes while the workflow holds the message (taken,
// not completed) waits for it. Unkeyed messages keep nothing.
const maxIdempotencyKeyBytes = 256

// Variables for tests.
var (
	sendKeysKept   = 1024
	sendKeysWindow = 24 * time.Hour
)

// sendKeyRecord is what a key records: its message, when it was sent, and
// a digest of what was sent (the same key with another message is the
// caller's mistake, not a retry).
type sendKeyRecord struct {
	Seq uint64 `json:"seq"`
	At  int64  `json:"at"` // unix ms
	// Sum digests the message with its JSON compacted; Same with its
	// objects' members sorted too (sendSums). A record from before Same
	// is compared by Sum alone, and Sum is still written for a node of
	// that build, which compares by it, during a rolling upgrade.
	Sum  string `json:"sum"`
	Same string `json:"same,omitempty"`
	// Keeps says that the completion of the message is kept (under
	// sendResponseKey) once the workflow completes it: a retry that waits
	// for a message taken and not completed may wait for its completion.
	// A record of a build from before kept completions says nothing of a
	// message completed then, and a waiting retry is answered at once, as
	// that build did.
	Keeps bool `json:"keeps,omitempty"`
}

func sendKeyKey(prefix, key string) string {
	return prefix + storage.IdempotencySuffix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// droppedMark is the kept completion of a message a workflow retry dropped
// (RetryOptions.DropMessages): not JSON, so no completion reads as it.
const droppedMark = "\x00dropped"

// sendResponseKey is the key of the kept completion of message seq, sent
// with an idempotency key. By message, not by key: a key used again after
// its window names another message, which must not find this one's.
func sendResponseKey(prefix string, seq uint64) string {
	return fmt.Sprintf("%s%s%020d", prefix, storage.IdempotencyResponseSuffix, seq)
}

// sendSums digests a message, its queue and body, twice: with its JSON
// compacted (whitespace aside), and as a JSON value (the order of an
// object's members aside too). A client retrying a send may build its
// JSON anew: a map in most languages serialises its members in no fixed
// order, and JSON's objects have none (RFC 8259), so a retry of the same
// value is the same message. Numbers are compared as they are written
// (1 and 1.0 differ): the actor's decoder may tell them apart.
func sendSums(queue string, body []byte) (sum, same string) {
	compact := body
	var buf bytes.Buffer
	if json.Compact(&buf, body) == nil {
		compact = buf.Bytes()
	}
	return digest(queue, compact), digest(queue, optjson.Canonical(body))
}

func digest(queue string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(queue))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// checkIdempotencyKey refuses a key that is too long, or not UTF-8 (a
// proto string: an actor calling another node's actor could not send it).
func checkIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKeyBytes {
		return rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key is %d bytes, the limit is %d", len(key), maxIdempotencyKeyBytes)
	}
	if !utf8.ValidString(key) {
		return rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q is not UTF-8", key)
	}
	return nil
}

// sendKeysLoaded reports whether loadSendKeys has nothing left to do.
func (a *activation) sendKeysLoaded() bool {
	a.keysMu.Lock()
	defer a.keysMu.Unlock()
	return a.sendKeys != nil
}

// loadSendKeys reads the actor's keys, the first time a send needs them
// (actors that are never sent to read nothing more), and moves nextSeq
// past the messages they name: neither the queues nor a pruned history may
// still hold the highest ID given, and a key must not come to name a
// message sent since. Every send, with a key or not, calls it before it
// takes an ID; so does a workflow's Complete, to learn whether the message
// has a key (once per activation, and only in one that completes a message
// before any send came). Called without keysMu: the read is made outside
// it, so that a send's turn never waits on the mutex for a read that
// Complete started (with the run's context, which has no deadline), and
// the first of them to finish installs what it read (they read the same:
// keys are written only by sends that loaded them first).
func (a *activation) loadSendKeys(ctx context.Context) error {
	if a.sendKeysLoaded() {
		return nil
	}
	kvs, err := a.h.store.List(ctx, a.prefix+storage.IdempotencySuffix, storage.ListOptions{})
	if err != nil {
		return rivet.Errorf(rivet.ErrUnavailable, "%s: read its idempotency keys: %v", a.describe(), err)
	}
	keys := make(map[string]sendKeyRecord, len(kvs))
	seqs := make(map[uint64]string, len(kvs))
	var next uint64
	for _, kv := range kvs {
		k, err := base64.RawURLEncoding.DecodeString(kv.Key[len(a.prefix)+len(storage.IdempotencySuffix):])
		var rec sendKeyRecord
		if err != nil || json.Unmarshal(kv.Value, &rec) != nil {
			continue // not one of ours: left alone
		}
		keys[string(k)] = rec
		seqs[rec.Seq] = string(k)
		next = max(next, rec.Seq+1)
	}
	a.keysMu.Lock()
	defer a.keysMu.Unlock()
	if a.sendKeys != nil {
		return nil // the other reader's came first
	}
	if next > a.nextSeq.Load() {
		a.nextSeq.Store(next)
	}
	a.sendKeys, a.keySeqs = keys, seqs
	return nil
}

// sentBefore returns the record of key if a send within the window used
// it. loadSendKeys must have run.
func (a *activation) sentBefore(key string, now time.Time) (sendKeyRecord, bool) {
	rec, ok := a.sendKeys[key]
	if !ok || now.Sub(time.UnixMilli(rec.At)) > sendKeysWindow {
		return sendKeyRecord{}, false
	}
	return rec, true
}

// recordSendKey returns the ops that record key for a send, and the keys
// they drop to keep sendKeysKept (the oldest first, so expired ones go
// first); keptSendKey applies them to memory once they commit. A record
// dropped or written over takes its message's kept completion with it
// (deleted whether or not there is one: memory does not know, and a
// delete of nothing costs an op in a transaction the send writes anyway).
func (a *activation) recordSendKey(key string, rec sendKeyRecord) (ops []storage.Op, dropped []string) {
	b, _ := json.Marshal(rec)
	ops = append(ops, storage.Put(sendKeyKey(a.prefix, key), b))
	over := len(a.sendKeys) + 1 - sendKeysKept
	if old, ok := a.sendKeys[key]; ok {
		over-- // an expired record of the same key is written over
		ops = append(ops, storage.Delete(sendResponseKey(a.prefix, old.Seq)))
	}
	switch {
	case over == 1:
		// The usual case once the actor holds its bound: one key goes,
		// found in one pass rather than by sorting them all.
		oldest, found := "", false
		for k, r := range a.sendKeys {
			if k != key && (!found || r.Seq < a.sendKeys[oldest].Seq) {
				oldest, found = k, true
			}
		}
		if found {
			dropped = append(dropped, oldest)
			ops = append(ops, storage.Delete(sendKeyKey(a.prefix, oldest)), storage.Delete(sendResponseKey(a.prefix, a.sendKeys[oldest].Seq)))
		}
	case over > 1:
		old := slices.SortedFunc(maps.Keys(a.sendKeys), func(x, y string) int {
			return cmp.Compare(a.sendKeys[x].Seq, a.sendKeys[y].Seq)
		})
		for _, k := range old {
			if len(dropped) == over {
				break
			}
			if k != key {
				dropped = append(dropped, k)
				ops = append(ops, storage.Delete(sendKeyKey(a.prefix, k)), storage.Delete(sendResponseKey(a.prefix, a.sendKeys[k].Seq)))
			}
		}
	}
	return ops, dropped
}

// keptSendKey is called with keysMu held, with the enqueue of the ops, so
// that a Complete (which holds no turn) keeps a completion only for a key
// whose drop was not enqueued before it: the drop deletes it, or it is not
// written.
func (a *activation) keptSendKey(key string, rec sendKeyRecord, dropped []string) {
	now := time.Now()
	for _, k := range dropped {
		if now.Sub(time.UnixMilli(a.sendKeys[k].At)) <= sendKeysWindow {
			a.h.sendKeysEvicted.Add(1)
		}
		delete(a.keySeqs, a.sendKeys[k].Seq)
		delete(a.sendKeys, k)
	}
	if old, ok := a.sendKeys[key]; ok {
		delete(a.keySeqs, old.Seq)
	}
	a.sendKeys[key] = rec
	a.keySeqs[rec.Seq] = key
}

// sameMessage refuses a key sent before with another message (its
// digests, sendSums).
func (a *activation) sameMessage(key string, rec, sent sendKeyRecord) error {
	if rec.Same != "" && rec.Same != sent.Same || rec.Same == "" && rec.Sum != sent.Sum {
		return rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another message (message %d, a different queue or body): use a new key for a new message", key, a.describe(), rec.Seq)
	}
	return nil
}

// stillQueued reports whether message seq is in one of the workflow's
// queues (not taken yet).
func (a *activation) stillQueued(seq uint64) bool {
	_, ok := slices.BinarySearchFunc(a.wf.msgs, seq, func(r msgRef, seq uint64) int { return cmp.Compare(r.seq, seq) })
	return ok
}
