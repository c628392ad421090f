package node

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rivet-go/rivet"
)

// backupInfoWait bounds each question Backup asks etcd about the member
// its snapshot comes from (its name, its database's size): what they
// answer names and sizes the file, and a member that does not answer (one
// of an external etcd's endpoints down, a cluster without quorum for the
// member list) must not hold the snapshot up.
const backupInfoWait = 2 * time.Second

// Backup implements server.Backuper: a snapshot of the node's etcd, its
// embedded member's, or one member's of its external etcd (the one its
// client's stream goes to: each member's database is the whole cluster's
// as of some revision).
func (b backend) Backup(ctx context.Context) (size int64, member string, r io.ReadCloser, err error) {
	cli := b.n.etcd
	snap, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "", nil, ctx.Err()
		}
		return 0, "", nil, rivet.Errorf(rivet.ErrUnavailable, "backup: etcd's snapshot: %v", err)
	}
	ictx, cancel := context.WithTimeout(ctx, backupInfoWait)
	defer cancel()
	if b.n.embedded != nil {
		// Its own member, named by the node's ID, called in process (the
		// stream's header has no member ID then).
		if st, err := cli.Status(ictx, b.n.embedded.Endpoints()[0]); err == nil {
			size = st.DbSize
		}
		return size, b.n.cfg.NodeID, snap.Snapshot, nil
	}
	// etcd leaves the stream's header without the member: with one
	// endpoint, it is that one's; with several, any of them.
	eps := cli.Endpoints()
	id := snap.Header.GetMemberId()
	if id == 0 && len(eps) == 1 {
		if st, err := cli.Status(ictx, eps[0]); err == nil {
			id, size = st.Header.GetMemberId(), st.DbSize
		}
	}
	if id == 0 {
		return 0, fmt.Sprintf("one of %s", strings.Join(eps, ", ")), snap.Snapshot, nil
	}
	member = strconv.FormatUint(id, 16)
	if ml, err := cli.MemberList(ictx); err == nil {
		for _, m := range ml.Members {
			if m.ID == id && m.Name != "" {
				member = m.Name
			}
		}
	}
	return size, member, snap.Snapshot, nil
}
