package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
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
	file := filepath.Join(t.TempDir(), "cluster.db")
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
