package node

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/rivet-go/rivet"
)

// Backup implements server.Backuper: a snapshot of the node's etcd, its
// embedded member's, or one member's of its external etcd (the one its
// client's stream goes to: each member's database is the whole cluster's
// as of some revision).
func (b backend) Backup(ctx context.Context) (size int64, member string, r io.ReadCloser, err error) {
	cli := b.n.etcd
	eps := cli.Endpoints()
	if b.n.embedded != nil {
		// The in-process client has no endpoints: its member's.
		eps = b.n.embedded.Endpoints()
	}
	if len(eps) > 0 {
		if st, err := cli.Status(ctx, eps[0]); err == nil {
			size = st.DbSize
			member = strconv.FormatUint(st.Header.GetMemberId(), 16)
			if ml, err := cli.MemberList(ctx); err == nil {
				for _, m := range ml.Members {
					if m.ID == st.Header.GetMemberId() && m.Name != "" {
						member = m.Name
					}
				}
			}
		}
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "", nil, ctx.Err()
		}
		return 0, "", nil, rivet.Errorf(rivet.ErrUnavailable, "backup: etcd's snapshot: %v", err)
	}
	if member == "" {
		member = fmt.Sprintf("at %v", eps)
	}
	return size, member, rc, nil
}
