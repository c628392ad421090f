package node

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node started with --etcd-restore-from in a new data directory serves
// what the snapshot held (a storage trial: the only packaged etcdctl made
// a member that never served, and the layout an embedded member needs was
// nowhere); started again with the flag still set, it goes on from what it
// has written since; a data directory whose member came from elsewhere is
// refused, not overwritten.
func TestANodeStartsFromABackup(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg1 := DefaultLocalConfig(t.TempDir())
	cfg1.HTTPAddr = "-"
	n1 := StartForTest(t, ctx, cfg1, reg)
	count := func(n *Node, action string, arg ...any) (int, error) {
		return counterCall(ctx, n, "kept", action, arg...)
	}
	if got, err := count(n1, "increment", 5); err != nil || got != 5 {
		t.Fatalf("increment: %d, %v", got, err)
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	etcdtest.SaveSnapshot(t, ctx, n1.etcd, backup)
	// After the backup: not in it.
	if got, err := count(n1, "increment", 100); err != nil || got != 105 {
		t.Fatalf("increment after the backup: %d, %v", got, err)
	}

	cfg2 := DefaultLocalConfig(t.TempDir())
	cfg2.HTTPAddr = "-"
	cfg2.EtcdRestoreFrom = backup
	// The first start restores, then fails before its member serves (its
	// etcd port is taken): the next one, without the flag (as the node's
	// logs advise), starts from that member and revokes the snapshot's
	// leases all the same (it took the old node for its cluster's, and
	// forwarded to it: 105, not 5).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg2.EtcdClientAddr = taken.Addr().String()
	if n, err := Start(ctx, cfg2, reg); err == nil {
		n.Stop(ctx)
		t.Fatal("a node started on an etcd port in use")
	}
	taken.Close()
	noFlag := cfg2
	noFlag.EtcdRestoreFrom = ""
	n2, err := Start(ctx, noFlag, reg)
	if err != nil {
		t.Fatal(err)
	}
	// The old node's lease, restored with its records, runs out first.
	var got int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, err = count(n2, "getCount"); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || got != 5 {
		t.Fatalf("count on the restored node: %d, %v; want 5, as backed up", got, err)
	}
	if got, err := count(n2, "increment", 1); err != nil || got != 6 {
		t.Fatalf("increment on the restored node: %d, %v; want 6", got, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := n2.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	// The same command again: it starts from its member, not the backup.
	n3 := StartForTest(t, ctx, cfg2, reg)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, err = count(n3, "getCount"); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || got != 6 {
		t.Fatalf("count after a restart with the flag still set: %d, %v; want 6, what it wrote since", got, err)
	}
	if err := n3.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	// The flag left in place while the file changed (touched, copied
	// again, gone): the node goes on from its member, not restoring again
	// nor refusing to start (a trial's compose node looped on "already
	// holds an etcd member" once its backup was re-synced).
	if err := os.Chtimes(backup, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	n4 := StartForTest(t, ctx, cfg2, reg)
	if got, err := count(n4, "getCount"); err != nil || got != 6 {
		t.Fatalf("count after a restart with the backup file touched: %d, %v; want 6", got, err)
	}
	if err := n4.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(backup); err != nil {
		t.Fatal(err)
	}
	n5 := StartForTest(t, ctx, cfg2, reg)
	if got, err := count(n5, "getCount"); err != nil || got != 6 {
		t.Fatalf("count after a restart with the backup file gone: %d, %v; want 6", got, err)
	}
	if err := n5.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	// Another backup (another hash) into the data directory of a member
	// restored from the first: refused, not ignored (the node served the
	// old data, and a cluster's member would stay in the old cluster).
	newer := filepath.Join(t.TempDir(), "newer.db")
	etcdtest.SaveSnapshot(t, ctx, n1.etcd, newer)
	cfg2.EtcdRestoreFrom = newer
	if n, err := Start(ctx, cfg2, reg); err == nil || !strings.Contains(err.Error(), "restored from another snapshot") {
		if n != nil {
			n.Stop(sctx)
		}
		t.Fatalf("start with another backup over a restored member: %v, want refused", err)
	}

	// A data directory whose member no restore made (the flag added to a
	// running node's command line): refused, not replaced.
	cfg1.EtcdRestoreFrom = newer
	if err := n1.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if n, err := Start(ctx, cfg1, reg); err == nil || !strings.Contains(err.Error(), "not restored from a snapshot") {
		if n != nil {
			n.Stop(sctx)
		}
		t.Fatalf("start with a snapshot over a member no restore made: %v, want refused", err)
	}
}

// A file that is not a complete snapshot is refused before etcd's restore
// runs, in plain words, and leaves no member behind.
func TestARestoreFromABadFileIsRefused(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = "-"
	cfg.EtcdRestoreFrom = filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(cfg.EtcdRestoreFrom, []byte(strings.Repeat("not a snapshot\n", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, cfg, reg)
	if err == nil {
		n.Stop(ctx)
		t.Fatal("a node started from a file that is no snapshot")
	}
	if !strings.Contains(err.Error(), "not a complete snapshot of etcd") {
		t.Fatalf("start from a bad file: %v, want it called no complete snapshot", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "etcd")); !os.IsNotExist(err) {
		t.Fatalf("a member was left behind: %v", err)
	}
}

// A node on an external etcd backs it up too: the snapshot of the member
// its client's stream went to, named as etcd names it, with its size.
func TestABackupThroughANodeOfAnExternalEtcd(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = "-"
	cfg.EtcdEndpoints = etcdtest.Start(t)
	n := StartForTest(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "x"), "increment", 1); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	info, err := c.Backup(ctx, &buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Member == "" || info.Member == "0" || info.Size <= 0 || info.Written != int64(buf.Len()) || info.Written < info.Size/2 {
		t.Fatalf("backup of an external etcd: %+v, %d bytes written; want its member named, its size, the file", info, buf.Len())
	}
}

// A node restored from a backup of a cluster secured with more than it is
// says so at ERROR: the restore revokes the registrations the "secured
// with less than the cluster" check compares with, and a compose restore
// that dropped the TLS overlay (a -f replacing COMPOSE_FILE) serves a TLS
// cluster's data in plaintext to anyone, with no other word.
// One restored with the same security says nothing.
func TestANodeRestoredWithLessSecurityThanItsBackupSaysSo(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg1 := DefaultLocalConfig(t.TempDir())
	cfg1.HTTPAddr = "-"
	cfg1.Token = "the-token"
	n1 := StartForTest(t, ctx, cfg1, reg)
	backup := filepath.Join(t.TempDir(), "backup.db")
	etcdtest.SaveSnapshot(t, ctx, n1.etcd, backup)

	const said = "restored from a backup of a cluster secured with more than this node"
	restore := func(token string) *observer.ObservedLogs {
		core, logs := observer.New(zap.WarnLevel)
		cfg := DefaultLocalConfig(t.TempDir())
		cfg.HTTPAddr = "-"
		cfg.Token = token
		cfg.EtcdRestoreFrom = backup
		cfg.Logger = zap.New(core)
		n := StartForTest(t, ctx, cfg, reg)
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := n.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		return logs
	}
	logs := restore("")
	got := logs.FilterMessageSnippet(said).All()
	if len(got) != 1 || got[0].Level != zap.ErrorLevel ||
		!strings.Contains(got[0].Message, "its nodes secured their gRPC port as plaintext+token ("+n1.ID()+"), this one as plaintext") {
		t.Fatalf("a plaintext, tokenless node restored from a backup of a node with a token logged %+v; want one ERROR naming both", logs.All())
	}
	if logs := restore("the-token"); logs.FilterMessageSnippet(said).Len() != 0 {
		t.Fatalf("a node restored with the backup's own security logged %+v", logs.FilterMessageSnippet(said).All())
	}
}
