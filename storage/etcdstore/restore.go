package etcdstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/snapfile"
)

// RestoreRevisionBump is how far a restore moves etcd's revision past the
// snapshot's, marking what lies between compacted: a client that saw a
// revision of the cluster before (a watch to resume, a node that was not
// stopped) gets "compacted" and lists again, rather than waiting for
// revisions the restored cluster gives to other writes. etcd's own advice
// (etcdutl snapshot restore --bump-revision --mark-compacted).
const RestoreRevisionBump = 1_000_000_000

// RestoreEmbedded makes cfg.Dir, which must not exist, the data directory
// of the member cfg describes, holding what snapshot (a file of etcdctl
// snapshot save or rivetctl backup, which ends with its hash, checked;
// not a member's database file copied) holds: StartEmbedded(cfg) then
// starts a cluster of one member, or of InitialCluster's members, each
// restored from the same snapshot with its own name and peer URL. The
// snapshot's own members are forgotten. As etcdutl snapshot restore does
// (etcdctl's restore is gone since etcd 3.6, and an older etcdctl's
// restore of this build's snapshot yields a member that never serves).
//
// It returns the snapshot's leases: the old cluster's nodes' own, with the
// records on them (a node's registration, its partitions' owners), which
// etcd restores with a full TTL. A node that restored revokes them once its
// member serves (RevokeRestoredLeases): until they ran out, it took the old
// nodes for its cluster's, and forwarded calls to their addresses, to a
// cluster still running there (a test's, or production's for a restore to
// a staging host).
func RestoreEmbedded(cfg EmbeddedConfig, snapshotPath string) (leases []int64, _ error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Dir); err == nil {
		return nil, fmt.Errorf("etcdstore: restore into %s: it exists; a restore makes a new member's directory", cfg.Dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("etcdstore: restore into %s: %w", cfg.Dir, err)
	}
	// A file cut short (a copy that failed, a download) or not a snapshot
	// is said so, before etcd's restore does in its own terms (a flag of
	// etcdutl's the node does not have, or "invalid argument").
	if err := snapfile.Check(snapshotPath); err != nil {
		return nil, fmt.Errorf("etcdstore: restore from %w", err)
	}
	peer := cfg.PeerURL
	if cfg.AdvertisePeerURL != "" {
		peer = cfg.AdvertisePeerURL
	}
	if _, err := url.Parse(peer); err != nil {
		return nil, fmt.Errorf("etcdstore: peer URL: %w", err)
	}
	initial := cfg.InitialCluster
	if initial == "" {
		initial = cfg.Name + "=" + peer // as StartEmbedded's member alone
	}
	token, err := restoredClusterToken(snapshotPath)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: restore from %s: %w", snapshotPath, err)
	}
	lg := zap.NewNop()
	if cfg.Logger != nil {
		// etcd's restore says every file it opens at info.
		lg = cfg.Logger.Named("etcd-restore").WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	}
	err = snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                cfg.Name,
		OutputDataDir:       cfg.Dir,
		PeerURLs:            []string{peer},
		InitialCluster:      initial,
		InitialClusterToken: token,
		RevisionBump:        RestoreRevisionBump,
		MarkCompacted:       true,
	})
	if err == nil {
		leases, err = restoredLeases(filepath.Join(cfg.Dir, "member", "snap", "db"))
	}
	if err != nil {
		// Nothing half made is left to be taken for a member.
		_ = os.RemoveAll(cfg.Dir)
		return nil, fmt.Errorf("etcdstore: restore %s into %s: %w", snapshotPath, cfg.Dir, err)
	}
	return leases, nil
}

// restoredClusterToken is the cluster token of a cluster restored from
// snapshotPath: the same for every member restored from that file, as
// they must share it, and another than the cluster's the snapshot came
// from, whose ID and members' IDs etcd derives from the token and the peer
// URLs. With the old token, a member of the old cluster still running at a
// peer URL the restored cluster names (a restore on the same hosts before
// every old node had stopped) was taken for a member of the restored one,
// and its leader sent the restored members the writes made after the
// backup. The file's last bytes are etcd's hash of its database (etcdctl
// snapshot save appends it; RestoreEmbedded checked it).
func restoredClusterToken(snapshotPath string) (string, error) {
	hash, err := snapfile.Hash(snapshotPath)
	if err != nil {
		return "", err
	}
	return "rivet-restored-" + hash[:16], nil
}

// restoredLeases lists the leases of a member's database, not running.
func restoredLeases(db string) ([]int64, error) {
	bdb, err := bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("read the restored leases: %w", err)
	}
	defer bdb.Close()
	var ids []int64
	err = bdb.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("lease")) // etcd's schema.Lease: key, the ID big-endian
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			if len(k) == 8 {
				ids = append(ids, int64(binary.BigEndian.Uint64(k)))
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read the restored leases: %w", err)
	}
	return ids, nil
}

// RevokeRestoredLeases revokes leases (RestoreEmbedded's) through cli:
// each node of a restored cluster may, and one already gone (another
// node's revoke, or run out) is no error.
func RevokeRestoredLeases(ctx context.Context, cli *clientv3.Client, leases []int64) error {
	if len(leases) == 0 {
		return nil
	}
	// Only those left: each member logs a warning for a revoke of a lease
	// it does not have, which every node of a restored cluster but the
	// first would make (18 warnings in a trial's clean restore).
	live, err := cli.Leases(ctx)
	if err != nil {
		return fmt.Errorf("etcdstore: list the leases to revoke: %w", err)
	}
	left := make(map[int64]bool, len(live.Leases))
	for _, l := range live.Leases {
		left[int64(l.ID)] = true
	}
	for _, id := range leases {
		if !left[id] {
			continue
		}
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcdstore: revoke the restored lease %x: %w", id, err)
		}
	}
	return nil
}

// DisarmForeignAlarms deactivates the NOSPACE alarms of members that are
// not members of cli's cluster, and returns how many. A snapshot holds the
// alarms raised in the cluster it was taken from (a NOSPACE during the
// incident the backup was for) under that cluster's member IDs: restored,
// the alarm blocked every write of the new cluster, whatever its quota,
// until an operator found and deactivated an alarm of a member that does
// not exist. A member that is really out of space raises its own again
// at its next write. Any other alarm is left: a CORRUPT one says that a
// member's data diverged, perhaps the one the backup was taken from,
// which no quota clears and which an operator must judge (etcd refuses
// every write meanwhile, "corrupt cluster", and the node exits with that).
func DisarmForeignAlarms(ctx context.Context, cli *clientv3.Client) (int, error) {
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: list the alarms: %w", err)
	}
	if len(alarms.Alarms) == 0 {
		return 0, nil
	}
	members, err := cli.MemberList(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: list the members: %w", err)
	}
	ours := make(map[uint64]bool, len(members.Members))
	for _, m := range members.Members {
		ours[m.ID] = true
	}
	n := 0
	for _, a := range alarms.Alarms {
		if a.Alarm != pb.AlarmType_NOSPACE || ours[a.MemberID] {
			continue
		}
		if _, err := cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			return n, fmt.Errorf("etcdstore: deactivate the %v alarm of member %x: %w", a.Alarm, a.MemberID, err)
		}
		n++
	}
	return n, nil
}
