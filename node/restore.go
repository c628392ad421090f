package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage/etcdstore"
)

// restoredMark names the file, in the data directory, that says which
// snapshot the embedded member was restored from.
const restoredMark = "etcd-restored-from"

// restoreMark is restoredMark's content: the snapshot as it was (its path,
// size and time, not a hash, which would read gigabytes at every start),
// its leases, and whether they have been revoked.
type restoreMark struct {
	Snapshot string  `json:"snapshot"`
	Size     int64   `json:"size"`
	ModTime  int64   `json:"mod_time_ns"`
	Leases   []int64 `json:"leases"`
	Revoked  bool    `json:"revoked"`
}

func (m restoreMark) sameFile(o restoreMark) bool {
	return m.Snapshot == o.Snapshot && m.Size == o.Size && m.ModTime == o.ModTime
}

// restored is what restoreEtcd leaves to do once the member serves: the
// snapshot's leases to revoke, then revokedAll to note it.
type restored struct {
	leases     []int64
	revokedAll func() error
}

// restoreEtcd makes ec.Dir a new member holding the snapshot at path
// (Config.EtcdRestoreFrom), once: a node whose data directory holds a
// member it restored goes on from that member whatever the flag names now
// (a compose file keeps the flag across restarts), and revokes the
// snapshot's leases if no start did yet (the first one may have failed
// before its member served). A member no restore made is refused, not
// replaced. The member is made in a directory beside ec.Dir and renamed
// into place once complete and noted, so that a crash during a restore
// leaves nothing to be taken for one.
func (n *Node) restoreEtcd(ec etcdstore.EmbeddedConfig, path string) (restored, error) {
	fail := func(err error) (restored, error) {
		return restored{}, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	markPath := filepath.Join(n.cfg.DataDir, restoredMark)
	note := func(m restoreMark) func() error {
		return func() error {
			m.Revoked = true
			return writeFileSynced(markPath, m)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(ec.Dir); err == nil {
		var prev restoreMark
		b, rerr := os.ReadFile(markPath)
		if rerr != nil || json.Unmarshal(b, &prev) != nil || prev.Snapshot == "" {
			return fail(fmt.Errorf("%s already holds an etcd member, not restored from a snapshot, which a restore would replace: to go on from it, start without --etcd-restore-from; to restore %s, give a new --data-dir", ec.Dir, abs))
		}
		// A member this node restored: it goes on from it, whatever the
		// flag names now. A compose file keeps the flag across restarts,
		// and a file touched, copied again or gone since must not stop
		// the node (it did, in a trial, once the backup was re-synced).
		if cur, err := snapshotMark(abs); err != nil || !cur.sameFile(prev) {
			n.log.Warn("this node's etcd member was restored before, from another snapshot or the file as it was then: starting from the member as it is now, not restoring again (drop --etcd-restore-from)",
				zap.String("restored_from", prev.Snapshot), zap.String("flag", abs))
		} else {
			n.log.Info("etcd was restored from this snapshot before: starting from its member as it is now (drop --etcd-restore-from)", zap.String("snapshot", abs))
		}
		if prev.Revoked {
			return restored{}, nil
		}
		// The start that restored failed before its member served.
		return restored{leases: prev.Leases, revokedAll: note(prev)}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	mark, err := snapshotMark(abs)
	if err != nil {
		return fail(err)
	}
	t0 := time.Now()
	// A file cut short (a copy that failed, a download) or not a snapshot
	// is said so, before etcd's restore does in its own terms (a flag of
	// etcdutl's the node does not have, or "invalid argument").
	if err := etcdstore.CheckSnapshot(abs); err != nil {
		return fail(err)
	}
	making := ec
	making.Dir = ec.Dir + ".restoring"
	if err := os.RemoveAll(making.Dir); err != nil { // an earlier restore's, cut short
		return fail(err)
	}
	leases, err := etcdstore.RestoreEmbedded(making, abs)
	if err != nil {
		return fail(fmt.Errorf("%w%s", err, memberStartHint(err, n.cfg.NodeID)))
	}
	mark.Leases = leases
	if err := writeFileSynced(markPath, mark); err != nil {
		return fail(err)
	}
	if err := os.Rename(making.Dir, ec.Dir); err != nil {
		return fail(err)
	}
	if err := syncDir(filepath.Dir(ec.Dir)); err != nil {
		return fail(err)
	}
	fields := []zap.Field{zap.String("snapshot", abs), zap.String("member", ec.Name), zap.Duration("took", time.Since(t0))}
	if strings.Contains(strings.Trim(ec.InitialCluster, ", "), ",") {
		// A member started without the flag bootstraps a cluster of its
		// own, empty, which serves: this one then waits, refused by it
		// as another cluster ("cluster ID mismatch").
		fields = append(fields, zap.String("hint", "every member of --etcd-initial-cluster must start with --etcd-restore-from and this same file; one started without it makes another, empty cluster"))
	}
	n.log.Info("etcd restored from a snapshot", fields...)
	return restored{leases: leases, revokedAll: note(mark)}, nil
}

// snapshotMark is the mark of the snapshot file at abs as it is now.
func snapshotMark(abs string) (restoreMark, error) {
	fi, err := os.Stat(abs)
	if err != nil {
		return restoreMark{}, err
	}
	return restoreMark{Snapshot: abs, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}, nil
}

// writeFileSynced writes v as JSON to path, durably: to a file beside it,
// synced, renamed over it, and the directory synced.
func writeFileSynced(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
