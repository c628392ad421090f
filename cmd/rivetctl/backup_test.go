package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/server/servertest"
)

// rivetctl backup saves what a node with --etcd-restore-from starts from,
// without etcdctl (node images have none; a storage trial found backup and
// restore undocumented, and the packaged etcdctl's restore broken): the
// restored node serves the state as of the backup. An existing file is not
// replaced without --force, and no cut file is left under the name.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	rivetctl(t, addr, "call", "counter", "saved", "increment", "7").want(t, 0, "7\n")
	// In a directory not made yet (backups/, as the docs write it).
	file := filepath.Join(t.TempDir(), "backups", "cluster.db")
	r := rivetctl(t, addr, "backup", file)
	// The member is named as etcd knows it: the node's ID.
	if r.code != 0 || !strings.HasPrefix(r.stdout, "backed up ") || !strings.Contains(r.stdout, " from etcd member node-") || !strings.Contains(r.stdout, "--etcd-restore-from "+file) || r.stderr != "" {
		t.Fatalf("backup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("the backup file: %v, %v", fi, err)
	}
	if left, _ := filepath.Glob(file + ".*.partial"); len(left) > 0 {
		t.Fatalf("partial files left: %v", left)
	}
	rivetctl(t, addr, "backup", file).wantErr(t, 2, "rivetctl: "+file+" exists: give another file, or --force to replace it")
	if r := rivetctl(t, addr, "backup", "--force", file); r.code != 0 {
		t.Fatalf("backup --force: exit %d, %s", r.code, r.stderr)
	}
	// After the backup: not in it.
	rivetctl(t, addr, "call", "counter", "saved", "increment", "100").want(t, 0, "107\n")

	n := startLocalNode(t, reg, func(c *node.Config) { c.EtcdRestoreFrom = file })
	rivetctl(t, n.GRPCAddr(), "call", "--read-only", "counter", "saved", "getCount").want(t, 0, "7\n")
}

// A backup that runs out of time says which flags gave it the time (its
// --wait, an hour by default, is most of it), and leaves no file.
func TestABackupOutOfTimeSaysItsFlags(t *testing.T) {
	t.Parallel()
	f := servertest.NewFake()
	f.BackupFunc = func(ctx context.Context) (int64, string, io.ReadCloser, error) {
		<-ctx.Done() // a member that sends nothing
		return 0, "", nil, ctx.Err()
	}
	addr := servertest.Start(t, f, servertest.Config{})
	file := filepath.Join(t.TempDir(), "cluster.db")
	rivetctl(t, addr, "backup", file, "--timeout", "100ms", "--wait", "200ms").
		wantErr(t, 1, "rivetctl: deadline exceeded: no answer from "+addr+" within 300ms (--timeout, plus the command's own wait) (DEADLINE_EXCEEDED)")
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "*")); len(left) > 0 {
		t.Fatalf("files left: %v", left)
	}
}
