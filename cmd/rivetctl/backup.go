package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/snapfile"
)

func (a *app) backupCommand() *cobra.Command {
	var (
		force bool
		wait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Save a snapshot of the cluster's etcd (everything it stores) to FILE",
		Long: `Backup saves a snapshot of the etcd the cluster stores everything in, taken by
the node at --addr from its embedded member (or one member of its external
etcd): the file etcdctl snapshot save writes, without etcdctl (node images
have none). A node starts from it with --etcd-restore-from FILE in a new
--data-dir (docs/deploy.md, "Backup and restore"). The file is written as
FILE.<random>.partial, read back (the hash etcd ends it with must match), and
renamed once complete, so FILE is never a cut snapshot; its directory is made
(owner only) if missing. It holds every actor's state and messages: keep it as
safe as the cluster.`,
		Args: args(1, 1),
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE if it exists")
	cmd.Flags().DurationVar(&wait, "wait", time.Hour, "how long the backup may take, on top of --timeout")
	cmd.RunE = a.runE(func() time.Duration { return wait }, func(ctx context.Context, c *client.Client, args []string) error {
		file := args[0]
		if wait < 0 {
			return usagef("--wait must not be negative, not %s", wait)
		}
		if _, err := os.Stat(file); err == nil && !force {
			return usagef("%s exists: give another file, or --force to replace it", file)
		}
		// A directory named for backups (backups/cluster.db, as the docs
		// write it) need not exist yet: a first backup would fail for want
		// of it. Readable by its owner only, as the file is: it holds every
		// actor's state.
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		// A name of its own: two backups to one FILE must not write
		// one file.
		f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*.partial")
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		tmp := f.Name()
		done := false
		defer func() {
			if !done {
				f.Close()
				os.Remove(tmp)
			}
		}()
		barOut := a.stderr
		if a.output == "json" || !isTerminal(a.stderr) {
			barOut = io.Discard
		}
		var bar *progressbar.ProgressBar
		t0 := time.Now()
		info, err := c.Backup(ctx, f, func(written, total int64) {
			if bar == nil {
				bar = progressbar.NewOptions64(max(total, written),
					progressbar.OptionSetWriter(barOut),
					progressbar.OptionSetDescription("backup"),
					progressbar.OptionShowBytes(true),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish(),
				)
			}
			if written > bar.GetMax64() {
				bar.ChangeMax64(written)
			}
			_ = bar.Set64(written)
		})
		if bar != nil {
			_ = bar.Finish()
		}
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		// Read back: a file whose hash does not match what it holds
		// never takes FILE's name.
		if err := snapfile.Check(tmp); err != nil {
			return fmt.Errorf("backup: the file written does not check: %w", err)
		}
		if err := os.Rename(tmp, file); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		done = true
		if d, err := os.Open(filepath.Dir(file)); err == nil {
			// The rename is durable once its directory is; a file system
			// that syncs no directory (EINVAL) leaves it to its own
			// flush, and the file is complete either way.
			_ = d.Sync()
			d.Close()
		}
		took := time.Since(t0).Round(time.Millisecond)
		if a.output == "json" {
			return a.printValue(map[string]any{"file": file, "bytes": info.Written, "member": info.Member, "took_ms": took.Milliseconds()})
		}
		_, err = fmt.Fprintf(a.stdout, "backed up %d bytes from etcd member %s to %s in %s (a node starts from it with --etcd-restore-from %s, in a new --data-dir)\n", info.Written, info.Member, file, took, file)
		return err
	})
	return cmd
}
