package etcdstore_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A snapshot of a member (what etcdctl snapshot save writes) restores into
// a new member's directory, which serves every key it held, at a revision
// past every one the old cluster gave (a watch resuming from one is told
// it was compacted), and takes writes. A directory that exists is refused,
// and left as it was.
func TestAMemberRestoresFromASnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := etcdstore.StartEmbedded(ctx, etcdstore.DefaultLocalEmbeddedConfig(filepath.Join(t.TempDir(), "etcd")))
	if err != nil {
		t.Fatal(err)
	}
	cli := e.Client()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cli.Put(ctx, "/rivet/"+k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	// A node's record, on its lease: gone once the lease is revoked.
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/rivet/nodes/old", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	last, err := cli.Put(ctx, "/rivet/a", "v-a2")
	if err != nil {
		t.Fatal(err)
	}
	oldRev := last.Header.Revision
	snap := filepath.Join(t.TempDir(), "backup.db")
	etcdtest.SaveSnapshot(t, ctx, cli, snap)
	// Written after the snapshot: not in the restore.
	if _, err := cli.Put(ctx, "/rivet/late", "x"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	e.Close()

	existing := t.TempDir()
	if _, err := etcdstore.RestoreEmbedded(etcdstore.DefaultLocalEmbeddedConfig(existing), snap); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("restore into an existing directory: %v, want refused", err)
	}
	if _, err := os.Stat(existing); err != nil {
		t.Fatalf("the existing directory was removed: %v", err)
	}

	cfg := etcdstore.DefaultLocalEmbeddedConfig(filepath.Join(t.TempDir(), "etcd"))
	cfg.Name = "restored"
	leases, err := etcdstore.RestoreEmbedded(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0] != int64(lease.ID) {
		t.Fatalf("restored leases %x, want the snapshot's one, %x", leases, lease.ID)
	}
	r, err := etcdstore.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rcli := r.Client()
	t.Cleanup(func() { rcli.Close() })
	got, err := rcli.Get(ctx, "/rivet/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var kvs []string
	for _, kv := range got.Kvs {
		kvs = append(kvs, string(kv.Key)+"="+string(kv.Value))
	}
	if strings.Join(kvs, " ") != "/rivet/a=v-a2 /rivet/b=v-b /rivet/c=v-c /rivet/nodes/old=x" {
		t.Fatalf("restored keys %q, want a, b, c and the node record as of the snapshot", kvs)
	}
	// Revoked twice (each node of a restored cluster does): no error, and
	// the record on it is gone.
	for range 2 {
		if err := etcdstore.RevokeRestoredLeases(ctx, rcli, leases); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := rcli.Get(ctx, "/rivet/nodes/", clientv3.WithPrefix()); err != nil || len(got.Kvs) != 0 {
		t.Fatalf("the old node's record after its lease was revoked: %v, %v", got.Kvs, err)
	}
	// Another cluster than the one backed up, though its member has the
	// same peer URL: a member of the old one still running there must not
	// be taken for one of it (it sent the restored members the writes
	// made after the backup, in a trial of a restore on the same hosts).
	if got.Header.ClusterId == last.Header.ClusterId {
		t.Fatalf("the restored cluster has the old one's ID, %x", got.Header.ClusterId)
	}
	if got.Header.Revision < oldRev+etcdstore.RestoreRevisionBump {
		t.Fatalf("restored revision %d, want past the old cluster's %d by %d", got.Header.Revision, oldRev, etcdstore.RestoreRevisionBump)
	}
	// A watch from a revision of the old cluster is told it is compacted
	// (and lists again), rather than wait for revisions never to come.
	wctx, wcancel := context.WithCancel(ctx)
	w := <-rcli.Watch(wctx, "/rivet/", clientv3.WithPrefix(), clientv3.WithRev(oldRev))
	wcancel()
	if w.CompactRevision == 0 {
		t.Fatalf("a watch from the old cluster's revision %d: %+v, want it compacted", oldRev, w)
	}
	if _, err := rcli.Put(ctx, "/rivet/new", "y"); err != nil {
		t.Fatalf("write to the restored member: %v", err)
	}
	members, err := rcli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || members.Members[0].Name != "restored" {
		t.Fatalf("members %v, want the restored one alone", members.Members)
	}
}

// A restore deactivates the NOSPACE alarms the snapshot held of members
// not in the cluster it restored into, and only those: a member of its own
// cluster that is out of space keeps its alarm (deactivated, it would let
// writes fill the disk), and so does a CORRUPT alarm of the old cluster
// (the backup may come from the member that diverged: an operator's call).
func TestDisarmForeignAlarmsDeactivatesOnlyForeignNoSpace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := etcdtest.StartClient(t)
	ms, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := ms.Members[0].ID
	const foreign = 0x1234abcd
	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	raised := []*pb.AlarmMember{
		{MemberID: foreign, Alarm: pb.AlarmType_NOSPACE},
		{MemberID: foreign + 1, Alarm: pb.AlarmType_CORRUPT},
		{MemberID: own, Alarm: pb.AlarmType_NOSPACE},
	}
	for _, a := range raised {
		if _, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			t.Fatalf("activate %v: %v", a, err)
		}
	}
	before, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Alarms) != len(raised) {
		t.Fatalf("alarms raised: %v, want %v", before.Alarms, raised)
	}
	n, err := etcdstore.DisarmForeignAlarms(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("deactivated %d alarms, want 1 (the foreign NOSPACE)", n)
	}
	after, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, a := range after.Alarms {
		left[fmt.Sprintf("%x/%v", a.MemberID, a.Alarm)] = true
	}
	want := map[string]bool{fmt.Sprintf("%x/CORRUPT", uint64(foreign+1)): true, fmt.Sprintf("%x/NOSPACE", own): true}
	if !maps.Equal(left, want) {
		t.Errorf("alarms left: %v, want %v", left, want)
	}
}
