package main

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// members shows each node's storage format, and below the table the
// formats the cluster has recorded, which say whether a node of a build
// could start (roll back) in it: an SRE's trial had no way but an etcdctl
// the node image lacks. In a rolling upgrade from an older build, a node
// of a build before format 2 (its registration says none) is of format 1;
// a node with no registration, of a format unknown, shows "-", not 0.
func TestMembersShowEachNodesStorageFormatAndTheRecordedFormats(t *testing.T) {
	t.Parallel()
	f := servertest.NewFake()
	f.MemberList = []runtime.Member{
		{NodeID: "n1", GRPCAddr: "127.0.0.1:6420", State: "alive", PartitionsOwned: 10, StartedAt: servertest.Created, StorageFormat: 4, Build: "rivet v0.9.0 abcdef012345 2026-12-06T10:00:00Z go1.26.8"},
		{NodeID: "n2", GRPCAddr: "127.0.0.1:6430", State: "alive", PartitionsOwned: 6, StartedAt: servertest.Created, StorageFormat: 1},
		{NodeID: "n3", GRPCAddr: "127.0.0.1:6440", State: "unregistered"},
	}
	f.Formats = []int{2, 3, 4}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "members").want(t, 0, `NODE  ADDRESS         GOSSIP  STATE         PARTITIONS  STARTED               FORMAT  BUILD
n1    127.0.0.1:6420  -       alive         10          2026-01-02T03:04:05Z  4       v0.9.0 abcdef012345
n2    127.0.0.1:6430  -       alive         6           2026-01-02T03:04:05Z  1       -
n3    127.0.0.1:6440  -       unregistered  0           -                     -       -
storage formats recorded: 2, 3, 4; a build of storage format 3 or older must not run in this cluster: it refuses to start, or, if it predates the record, starts and misreads the data (docs/deploy.md, "Downgrades")
`)
	rivetctl(t, addr, "members", "-o", "json").want(t, 0, `[{"node_id":"n1","grpc_addr":"127.0.0.1:6420","state":"alive","partitions_owned":10,"started_at":"2026-01-02T03:04:05Z","build":"rivet v0.9.0 abcdef012345 2026-12-06T10:00:00Z go1.26.8","storage_format":4},`+
		`{"node_id":"n2","grpc_addr":"127.0.0.1:6430","state":"alive","partitions_owned":6,"started_at":"2026-01-02T03:04:05Z","storage_format":1},`+
		`{"node_id":"n3","grpc_addr":"127.0.0.1:6440","state":"unregistered","partitions_owned":0}]`+"\n")

	const line = "\nstorage formats recorded: "
	for _, tc := range []struct {
		formats []int
		want    string
	}{
		{[]int{2}, line + "2; a build of storage format 1 must not run in this cluster: it predates the record, so it starts, and misreads the data (docs/deploy.md, \"Downgrades\")\n"},
		{[]int{}, line + "none (no build refuses to start in this cluster)\n"},
		{nil, line + "unknown (the node that answered could not read them from etcd, or is of an older build)\n"},
	} {
		f := servertest.NewFake()
		f.Formats = tc.formats
		if r := rivetctl(t, servertest.Start(t, f, servertest.Config{}), "members"); r.code != 0 || !strings.HasSuffix(r.stdout, tc.want) || r.stderr != "" {
			t.Errorf("recorded formats %v: exit %d, stdout:\n%s\nstderr %q; want the table, then%s", tc.formats, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// A node of an older build, whose answer has no storage formats, lists
// its members of an unknown format, and the recorded formats as unknown,
// not as none.
func TestMembersOfAnOlderNodeSayTheFormatsAreUnknown(t *testing.T) {
	t.Parallel()
	addr := serveOldAdmin(t)
	r := rivetctl(t, addr, "members")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "  FORMAT  BUILD") || !strings.HasSuffix(lines[1], "Z  -       -") ||
		!strings.HasPrefix(lines[2], "storage formats recorded: unknown (") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %q; want old of format -, and the recorded formats unknown", r.code, r.stdout, r.stderr)
	}
	if r = rivetctl(t, addr, "members", "-o", "json"); r.code != 0 || strings.Contains(r.stdout, "storage_format") {
		t.Errorf("-o json: exit %d, stdout %s; want no storage_format", r.code, r.stdout)
	}
}
