package storage

import (
	"fmt"
	"strconv"
	"strings"
)

// The storage layout (DESIGN.md section 4). Keys are relative to the store's
// namespace (default /rivet/). Partition numbers are zero-padded so that key
// order is partition order.
const (
	// ClusterConfigKey holds the cluster's fixed configuration (partition
	// count), written once when the cluster is created.
	ClusterConfigKey = "cluster/config"
	// FormatsPrefix holds one key per storage format the cluster's nodes
	// have begun to write (FormatKey), written before the first write in
	// it and never deleted: a build that reads only older formats finds
	// one it does not know here and refuses to start, instead of loading
	// data it would misread.
	FormatsPrefix = "cluster/formats/"
	// NodesPrefix holds one record per live node, on the node's lease.
	NodesPrefix = "nodes/"
	// OwnersPrefix holds one owner claim per owned partition, on the
	// owner's lease. The key's create revision is the fencing token.
	OwnersPrefix = "owners/"
	// ActorsPrefix holds everything of every actor, under its partition.
	ActorsPrefix = "a/"
	// IndexPrefix holds one entry per actor by name, so that listing actors
	// does not scan their state and history.
	IndexPrefix = "ix/"
	// FailedPrefix holds one entry per actor whose workflow failed, by
	// name, written with the failure and deleted by a retry or Destroy, so
	// that listing failed workflows does not read every actor's status.
	FailedPrefix = "failed/"
	// WakeupsPrefix holds, per partition, the actors that must run without a
	// request (a pending sleep, a queued message, an unfinished workflow).
	WakeupsPrefix = "wakeups/"
	// SchedulesPrefix holds, per partition, the actors' scheduled calls
	// (rivet.Scheduler): sched/<p>/<name>/<key>/<id>. Per partition, as
	// wakeups are, so that a node claiming partitions finds their timers
	// without reading every actor.
	SchedulesPrefix = "sched/"
)

// FormatKey is the key that records that the cluster writes storage
// format f.
func FormatKey(f int) string { return FormatsPrefix + strconv.Itoa(f) }

// ParseFormatKey returns the storage format of a FormatKey.
func ParseFormatKey(key string) (int, bool) {
	f, err := strconv.Atoi(strings.TrimPrefix(key, FormatsPrefix))
	return f, err == nil && strings.HasPrefix(key, FormatsPrefix) && f > 0
}

// NodeKey is the key of a node's registration record.
func NodeKey(node string) string { return NodesPrefix + node }

// OwnerKey is the key of a partition's owner claim.
func OwnerKey(p uint32) string { return string(appendPartition([]byte(OwnersPrefix), p)) }

// ParseOwnerKey returns the partition of an owner key.
func ParseOwnerKey(key string) (uint32, bool) {
	var p uint32
	rest, ok := strings.CutPrefix(key, OwnersPrefix)
	if !ok {
		return 0, false
	}
	if _, err := fmt.Sscanf(rest, "%d", &p); err != nil {
		return 0, false
	}
	return p, true
}

// PartitionPrefix is the prefix of every actor key of partition p.
func PartitionPrefix(p uint32) string {
	return string(append(appendPartition([]byte(ActorsPrefix), p), '/'))
}

// appendPartition appends p zero-padded to five digits, as %05d does.
// Every forwarded and every served call builds such keys, and fmt costs
// them several times as much (and a deep stack).
func appendPartition(b []byte, p uint32) []byte {
	for n := uint32(10000); n > 1 && p < n; n /= 10 {
		b = append(b, '0')
	}
	return strconv.AppendUint(b, uint64(p), 10)
}

// ActorPrefix is the prefix of every key of one actor. encKey is the
// actor's key as EncodeKey returns it, which has no '/' so that no actor's
// prefix is a prefix of another's.
func ActorPrefix(p uint32, name, encKey string) string {
	return PartitionPrefix(p) + name + "/" + encKey + "/"
}

// IndexKey is the key of an actor's index entry.
func IndexKey(name, encKey string) string { return IndexPrefix + name + "/" + encKey }

// FailedKey is the key of an actor's entry in the index of failed
// workflows.
func FailedKey(name, encKey string) string { return FailedPrefix + name + "/" + encKey }

// WakeupKey is the key of an actor's wakeup entry.
func WakeupKey(p uint32, name, encKey string) string {
	return fmt.Sprintf("%s%05d/%s/%s", WakeupsPrefix, p, name, encKey)
}

// WakeupPartitionPrefix is the prefix of partition p's wakeup records.
func WakeupPartitionPrefix(p uint32) string {
	return fmt.Sprintf("%s%05d/", WakeupsPrefix, p)
}

// ScheduleActorPrefix is the prefix of one actor's scheduled calls.
func ScheduleActorPrefix(p uint32, name, encKey string) string {
	return SchedulePartitionPrefix(p) + name + "/" + encKey + "/"
}

// ScheduleKey is the key of one scheduled call.
func ScheduleKey(p uint32, name, encKey, id string) string {
	return ScheduleActorPrefix(p, name, encKey) + id
}

// SchedulePartitionPrefix is the prefix of partition p's scheduled calls.
func SchedulePartitionPrefix(p uint32) string {
	return string(append(appendPartition([]byte(SchedulesPrefix), p), '/'))
}

// Suffixes of an actor's keys under ActorPrefix.
const (
	MetaSuffix     = "meta"
	StateSuffix    = "state"
	QueueSuffix    = "q/"  // q/<seq as 20 digits>/<queue>
	WorkflowSuffix = "wf/" // wf/<entry path; a loop's iteration by its slot if it keeps slots>
	// WorkflowStatusSuffix holds the workflow's status (running, completed,
	// failed) and error; outside wf/ so that history prefix deletes never
	// touch it.
	WorkflowStatusSuffix = "wfstatus"
	// AttemptMarkSuffix holds the markers of step attempts whose bodies
	// started and have not recorded their end: am/<entry path>
	// (runtime's attempts.go). Outside wf/, so that history listings,
	// prunes and retries read or delete none of them, and builds that
	// do not know them ignore them.
	AttemptMarkSuffix = "am/"
	// IdempotencySuffix holds the idempotency keys of the actor's recent
	// sends: k/<key, base64url>.
	IdempotencySuffix = "k/"
	// IdempotencyResponseSuffix holds the completions of messages sent
	// with an idempotency key the actor still holds, for a waiting send
	// retried with that key: kr/<message ID as 20 digits>. Outside k/, so
	// that reading the keys reads none of them.
	IdempotencyResponseSuffix = "kr/"
	// CallKeySuffix holds the idempotency keys of the actor's recent
	// calls: c/<key, base64url> (runtime's callkeys.go).
	CallKeySuffix = "c/"
	// CallResultSuffix holds the results of those calls, for a call sent
	// again with its key: cr/<key, base64url>. Outside c/, so that reading
	// the keys reads none of them.
	CallResultSuffix = "cr/"
	// NextMessageSuffix (under q/, which a load lists anyway) holds
	// {"next": N}: no message of the actor had an ID of N or above when
	// it was written. The queues and the history name the IDs given until
	// a prune deletes the receives that took them; this key is written
	// with every commit that deletes history, so that no ID is given twice.
	NextMessageSuffix = "q/~next"
)

// EncodeKey encodes an actor key's components into one path segment: each
// component is escaped so that it holds no '/', ',' or '%', and components
// are joined with ','. It is injective over keys of one component or more,
// the only ones an actor has (rivet.ValidateKey): the empty key encodes as
// the key of one empty component does, and decodes as that.
func EncodeKey(key []string) string {
	var b strings.Builder
	for i, c := range key {
		if i > 0 {
			b.WriteByte(',')
		}
		for j := 0; j < len(c); j++ {
			ch := c[j]
			switch ch {
			case '/', ',', '%':
				fmt.Fprintf(&b, "%%%02X", ch)
			default:
				b.WriteByte(ch)
			}
		}
	}
	return b.String()
}

// DecodeKey is the inverse of EncodeKey.
func DecodeKey(enc string) ([]string, error) {
	parts := strings.Split(enc, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			if p[i] != '%' {
				b.WriteByte(p[i])
				continue
			}
			if i+2 >= len(p) {
				return nil, fmt.Errorf("storage: bad key encoding %q", enc)
			}
			var v byte
			if _, err := fmt.Sscanf(p[i+1:i+3], "%02X", &v); err != nil {
				return nil, fmt.Errorf("storage: bad key encoding %q", enc)
			}
			b.WriteByte(v)
			i += 2
		}
		out = append(out, b.String())
	}
	return out, nil
}
