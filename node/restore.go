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

	"github.com/rivet-go/rivet/internal/snapfile"
	"github.com/rivet-go/rivet/storage/etcdstore"
)

// restoredMark names the file, in the member's directory (<data>/etcd),
// that says which snapshot the member was restored from: made, renamed and
// deleted with the member, so that it never speaks for another.
const restoredMark = "rivet-restored-from"

// restoreMark is restoredMark's content: the snapshot (its path then, and
// the hash etcd ends it with, which tells it from another whatever its
// name or time), its leases, and whether they have been revoked.
type restoreMark struct {
	Snapshot string  `json:"snapshot"`
	Hash     string  `json:"hash"`
	Leases   []int64 `json:"leases"`
	Revoked  bool    `json:"revoked"`
}

// restored is what a restore leaves to do once the member serves: the
// snapshot's leases to revoke, then revokedAll to note it. Zero: nothing.
type restored struct {
	leases     []int64
	revokedAll func() error
}

// readRestoreMark reads the mark of the member in dir; ok false if it has
// none (no restore made it).
func readRestoreMark(dir string) (m restoreMark, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, restoredMark))
	if errors.Is(err, os.ErrNotExist) {
		return restoreMark{}, false, nil
	}
	if err != nil {
		return restoreMark{}, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return restoreMark{}, false, fmt.Errorf("%s: %w", filepath.Join(dir, restoredMark), err)
	}
	return m, true, nil
}

// pendingRestore is what the member in ec.Dir still needs of its restore,
// on every start of an embedded member, with --etcd-restore-from or not:
// the snapshot's leases, if no start revoked them yet (the one that
// restored failed, or was stopped, before its member served; a start
// without the flag, as the node's logs advise, must revoke them all the
// same). It also removes what a restore cut short left beside ec.Dir.
func (n *Node) pendingRestore(ec etcdstore.EmbeddedConfig) (restored, error) {
	if err := os.RemoveAll(ec.Dir + ".restoring"); err != nil {
		return restored{}, fmt.Errorf("node: remove an unfinished restore: %w", err)
	}
	m, ok, err := readRestoreMark(ec.Dir)
	if err != nil {
		return restored{}, fmt.Errorf("node: %w", err)
	}
	if !ok || m.Revoked {
		return restored{}, nil
	}
	n.log.Info("etcd was restored from a snapshot whose leases no start revoked yet: revoking them once the member serves", zap.String("snapshot", m.Snapshot))
	return restored{leases: m.Leases, revokedAll: func() error {
		m.Revoked = true
		return writeFileSynced(filepath.Join(ec.Dir, restoredMark), m)
	}}, nil
}

// restoreEtcd makes ec.Dir a new member holding the snapshot at path
// (Config.EtcdRestoreFrom), once: a node whose member was restored from
// that snapshot (the same hash, whatever the file's name or time now, or
// the file gone) goes on from it, as a compose file keeps the flag across
// restarts; a member no restore made, or one restored from another
// snapshot, is refused, not replaced. The member is made in a directory
// beside ec.Dir, with its mark, and renamed into place once complete, so
// that a crash during a restore leaves nothing to be taken for one.
func (n *Node) restoreEtcd(ec etcdstore.EmbeddedConfig, path string) (restored, error) {
	fail := func(err error) (restored, error) {
		return restored{}, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(ec.Dir); err == nil {
		prev, ok, err := readRestoreMark(ec.Dir)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(fmt.Errorf("%s already holds an etcd member, not restored from a snapshot, which a restore would replace: to go on from it, start without --etcd-restore-from; to restore %s, give a new --data-dir", ec.Dir, abs))
		}
		hash, herr := snapfile.Hash(abs)
		switch {
		case errors.Is(herr, os.ErrNotExist):
			n.log.Warn("etcd was restored before, and the snapshot named by --etcd-restore-from is gone: starting from the member as it is now (drop --etcd-restore-from)", zap.String("restored_from", prev.Snapshot), zap.String("flag", abs))
		case herr != nil:
			return fail(herr)
		case hash != prev.Hash:
			// A new backup meant to replace what this member holds:
			// going on from the old one would serve the old data (and,
			// in a cluster, leave this member out of the new one).
			return fail(fmt.Errorf("%s holds the member restored from another snapshot (%s as it was then): to restore %s, give a new --data-dir (or remove %s); to go on from the member, start without --etcd-restore-from", ec.Dir, prev.Snapshot, abs, ec.Dir))
		default:
			n.log.Info("etcd was restored from this snapshot before: starting from its member as it is now (drop --etcd-restore-from)", zap.String("snapshot", abs))
		}
		return n.pendingRestore(ec)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	t0 := time.Now()
	hash, err := snapfile.Hash(abs)
	if err != nil {
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
	mark := restoreMark{Snapshot: abs, Hash: hash, Leases: leases}
	if err := writeFileSynced(filepath.Join(making.Dir, restoredMark), mark); err != nil {
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
	return n.pendingRestore(ec)
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
