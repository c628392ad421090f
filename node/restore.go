package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// (Config.EtcdRestoreFrom), unless it was made from that very snapshot
// before: a node restarted with the flag still set (a compose file's
// command line) starts from what it restored and has written since, and
// revokes the snapshot's leases if no start did yet (the first one may
// have failed before its member served). A member directory made any
// other way is refused, not overwritten. The member is made in a
// directory beside ec.Dir and renamed into place once complete and noted,
// so that a crash during a restore leaves nothing to be taken for one.
func (n *Node) restoreEtcd(ec etcdstore.EmbeddedConfig, path string) (restored, error) {
	fail := func(err error) (restored, error) {
		return restored{}, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fail(err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fail(err)
	}
	mark := restoreMark{Snapshot: abs, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
	markPath := filepath.Join(n.cfg.DataDir, restoredMark)
	note := func(m restoreMark) func() error {
		return func() error {
			m.Revoked = true
			return writeFileSynced(markPath, m)
		}
	}
	if _, err := os.Stat(ec.Dir); err == nil {
		var prev restoreMark
		b, rerr := os.ReadFile(markPath)
		switch {
		case rerr == nil && json.Unmarshal(b, &prev) == nil && prev.sameFile(mark):
			if prev.Revoked {
				n.log.Info("etcd was restored from this snapshot before: starting from its member as it is now (drop --etcd-restore-from)", zap.String("snapshot", abs))
				return restored{}, nil
			}
			n.log.Info("etcd was restored from this snapshot before, its leases not yet revoked: starting from its member, revoking them", zap.String("snapshot", abs))
			return restored{leases: prev.Leases, revokedAll: note(prev)}, nil
		case rerr == nil && prev.Snapshot != "":
			return fail(fmt.Errorf("%s already holds an etcd member, restored from %s (as it was then): to go on from it, start without --etcd-restore-from; to restore %s, give a new --data-dir", ec.Dir, prev.Snapshot, abs))
		}
		return fail(fmt.Errorf("%s already holds an etcd member, which a restore would replace: to go on from it, start without --etcd-restore-from; to restore %s, give a new --data-dir", ec.Dir, abs))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	t0 := time.Now()
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
	n.log.Info("etcd restored from a snapshot", zap.String("snapshot", abs), zap.String("member", ec.Name), zap.Duration("took", time.Since(t0)))
	return restored{leases: leases, revokedAll: note(mark)}, nil
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
