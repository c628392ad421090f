package node

import (
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

// restoreEtcd makes ec.Dir a new member holding the snapshot at path
// (Config.EtcdRestoreFrom), unless it was made from that very snapshot
// before: a node restarted with the flag still set (a compose file's
// command line) starts from what it restored and has written since. A
// member directory made any other way is refused, not overwritten.
//
// It returns the leases of the snapshot's nodes, if it restored it.
func (n *Node) restoreEtcd(ec etcdstore.EmbeddedConfig, path string) ([]int64, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	// The file as it is: its path, size and time (not a hash, which would
	// read gigabytes at every start).
	mark := fmt.Sprintf("%s\n%d\n%d\n", abs, fi.Size(), fi.ModTime().UnixNano())
	markPath := filepath.Join(n.cfg.DataDir, restoredMark)
	if _, err := os.Stat(ec.Dir); err == nil {
		if prev, err := os.ReadFile(markPath); err == nil && string(prev) == mark {
			n.log.Info("etcd was restored from this snapshot before: starting from its member as it is now (drop --etcd-restore-from)", zap.String("snapshot", abs))
			return nil, nil
		}
		return nil, fmt.Errorf("node: --etcd-restore-from %s: %s already holds an etcd member, which a restore would replace: restore into a new --data-dir", abs, ec.Dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	t0 := time.Now()
	leases, err := etcdstore.RestoreEmbedded(ec, abs)
	if err != nil {
		return nil, fmt.Errorf("node: --etcd-restore-from: %w", err)
	}
	if err := os.WriteFile(markPath, []byte(mark), 0o600); err != nil {
		// The member is made: a start without the flag uses it; one with
		// it would refuse it. Said now rather than at that start.
		return nil, fmt.Errorf("node: --etcd-restore-from: restored into %s, but could not note it (%w): start again without the flag", ec.Dir, err)
	}
	n.log.Info("etcd restored from a snapshot", zap.String("snapshot", abs), zap.String("member", ec.Name), zap.Duration("took", time.Since(t0)))
	return leases, nil
}
