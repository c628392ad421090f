package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// BackupInfo says what Backup wrote.
type BackupInfo struct {
	// Member names the etcd member the snapshot comes from.
	Member string
	// Size is the database's size etcd reported before it began (about the
	// file's; a progress bar's total).
	Size int64
	// Written is the bytes written to w: the whole snapshot, if Backup
	// returned no error.
	Written int64
}

// Backup writes a snapshot of the cluster's etcd to w: everything the
// cluster stores, as `etcdctl snapshot save` writes it, which a node
// starts from with --etcd-restore-from (docs/deploy.md, "Backup and
// restore"). progress, if not nil, is told the bytes written so far and the
// expected total after each part. A failure before the first byte is
// retried as a read is; one after it is returned, with what w got so far
// not a snapshot (write to a temporary file, rename it once Backup
// returned nil). The snapshot holds every actor's state and messages:
// keep it as safe as the cluster.
func (c *Client) Backup(ctx context.Context, w io.Writer, progress func(written, total int64)) (BackupInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type opened struct {
		stream grpc.ServerStreamingClient[rivetv1.BackupResponse]
		first  *rivetv1.BackupResponse
	}
	open := func(ctx context.Context, req *rivetv1.BackupRequest, opts ...grpc.CallOption) (opened, error) {
		stream, err := c.admin.Backup(ctx, req, opts...)
		if err != nil {
			return opened{}, err
		}
		first, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the node ended the backup before it began")
		}
		return opened{stream: stream, first: first}, err
	}
	o, err := invoke(ctx, c, idempotent, open, &rivetv1.BackupRequest{})
	if err != nil {
		return BackupInfo{}, err
	}
	info := BackupInfo{Member: o.first.GetMember(), Size: o.first.GetSize()}
	for {
		m, err := o.stream.Recv()
		if errors.Is(err, io.EOF) {
			if info.Written == 0 {
				return info, rivet.Errorf(rivet.ErrUnavailable, "the backup from etcd member %s ended with no data", info.Member)
			}
			return info, nil
		}
		if err != nil {
			return info, fromStatus(ctx, status.Convert(err))
		}
		n, err := w.Write(m.GetData())
		info.Written += int64(n)
		if err != nil {
			return info, fmt.Errorf("backup: write: %w", err)
		}
		if progress != nil {
			progress(info.Written, info.Size)
		}
	}
}
