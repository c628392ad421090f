package etcdstore

import "testing"

// Only a member with followers to catch up keeps more than a few raft
// entries in memory; an operator's own choice stands.
func TestRaftLogEntriesDependOnTheClusterAround(t *testing.T) {
	for _, c := range []struct {
		cluster, state string
		set, want      uint64
	}{
		{"", "", 0, EmbeddedRaftLogAlone},
		{"n1=http://127.0.0.1:2380", "new", 0, EmbeddedRaftLogAlone},
		{"n1=http://127.0.0.1:2380,n2=http://127.0.0.1:2381", "", 0, EmbeddedRaftLogCluster},
		{"n1=http://127.0.0.1:2380", "existing", 0, EmbeddedRaftLogCluster},
		{"", "", 7, 7},
	} {
		cfg := DefaultLocalEmbeddedConfig(t.TempDir())
		cfg.InitialCluster, cfg.InitialClusterState, cfg.RaftLogEntries = c.cluster, c.state, c.set
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.RaftLogEntries != c.want {
			t.Errorf("cluster %q, state %q, set %d: %d raft entries kept, want %d", c.cluster, c.state, c.set, cfg.RaftLogEntries, c.want)
		}
	}
}
