package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.etcd.io/etcd/server/v3/storage/mvcc"

	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// mutableCore drops every entry once muted is set, and the few warnings
// and errors etcd logs on every start of an embedded member though
// nothing is wrong (see harmless): a user who runs a node and reads
// "not recommended for production" or an ERROR before the first call
// goes looking for a fault that is not there.
type mutableCore struct {
	zapcore.Core
	muted *atomic.Bool
}

// Messages etcd logs at warn or error that say nothing to a node's
// operator, each with why.
const (
	// The member serves its gRPC and HTTP clients on one port (cmux). The
	// advice is for an etcd whose HTTP API takes load beside gRPC; the
	// node calls its member in process and its peers call it over gRPC.
	msgSinglePort = "Running http and grpc server on single port. This is not recommended for production."
	// Auth is never enabled on an embedded member, so no token is made.
	msgSimpleToken = "simple token is not cryptographically signed"
	// etcd's version monitor may try to record the storage schema before
	// the member's first apply has written the term it detects it by; it
	// tries again and succeeds. etcd's own test of error-free startup
	// ignores this entry (etcd-io/etcd#18978). Only that cause is
	// dropped: any other error of the message is logged.
	msgStorageVersion = "failed to update storage version"
	// The same monitor's warning, for the same cause, on some first starts.
	msgSchemaDetect = "Failed to detect schema version"
	// A restarted member publishes itself while it still applies the log
	// it replays; until it has caught up (5,000 entries behind at most)
	// raft refuses new requests as too many, and the member tries again at
	// once: ten warnings in a millisecond on every restart with a long
	// log (a user trial), then it is ready. Only that cause is dropped.
	msgPublish = "failed to publish local member to cluster through raft"
)

func (c *mutableCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	switch {
	case c.muted.Load(), e.Message == msgSinglePort, e.Message == msgSimpleToken:
		return ce
	case e.Message == msgStorageVersion, e.Message == msgSchemaDetect, e.Message == msgPublish:
		// Dropped by their error, which only Write sees; what is kept
		// is rationed as the rest (filtered: Check decides, not Write).
		return filtered(c.Core, e, ce, func(fields []zapcore.Field) ([]zapcore.Field, bool) {
			return fields, !harmless(e.Message, fields)
		})
	}
	return c.Core.Check(e, ce)
}

func (c *mutableCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if harmless(e.Message, fields) {
		return nil
	}
	return c.Core.Write(e, fields)
}

// harmless reports whether an entry of message msg with fields is one of
// those etcd logs though nothing is wrong, told by its error.
func harmless(msg string, fields []zapcore.Field) bool {
	switch msg {
	case msgStorageVersion, msgSchemaDetect:
		return schemaNotYetDetectable(fields)
	case msgPublish:
		return stillApplying(fields)
	}
	return false
}

// schemaNotYetDetectable reports whether fields hold the error of a
// storage version update tried before the member's first apply.
func schemaNotYetDetectable(fields []zapcore.Field) bool {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			msg := err.Error()
			return strings.Contains(msg, "missing term information") || strings.Contains(msg, "missing confstate information")
		}
	}
	return false
}

// stillApplying reports whether fields hold the error of a request raft
// refused while the member applies what it has committed.
func stillApplying(fields []zapcore.Field) bool {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			return errors.Is(err, etcderrors.ErrTooManyRequests)
		}
	}
	return false
}

func (c *mutableCore) With(f []zapcore.Field) zapcore.Core {
	return &mutableCore{Core: c.Core.With(f), muted: c.muted}
}

// EmbeddedConfig configures an etcd member run inside the node.
type EmbeddedConfig struct {
	// Name is the member's name, unique in its cluster. Empty means
	// "default", etcd's own default.
	Name string
	// Dir holds the member's data (WAL and database). Required. A Dir that
	// already holds data restarts that member; InitialCluster is then
	// ignored.
	Dir string
	// ClientURL is where clients reach the member, e.g.
	// http://127.0.0.1:2379. Port 0 picks a free port (Endpoints says which).
	ClientURL string
	// PeerURL is where other members reach it, e.g. http://127.0.0.1:2380.
	// Port 0 picks a free port, which only a single-member cluster can use
	// (its peers would need to know the port).
	PeerURL string
	// AdvertiseClientURL and AdvertisePeerURL are the URLs the member tells
	// others, when they differ from the listen URLs (a member listening on
	// 0.0.0.0 in a container advertises its host name). Empty: the listen
	// URL.
	AdvertiseClientURL string
	AdvertisePeerURL   string
	// InitialCluster lists every member of a new cluster as
	// name=peerURL,name=peerURL. Empty means a cluster of this member alone.
	InitialCluster string
	// InitialClusterState is "new" (the zero value) to form a cluster from
	// InitialCluster, or "existing" to join a running one.
	InitialClusterState string
	// Logger receives the member's logs at warn level and above (etcd is
	// verbose at info). Nil discards them.
	Logger *zap.Logger
	// AutoCompactionRetention is how much key history etcd keeps; older
	// revisions are compacted periodically. Embedded etcd compacts nothing
	// by default, so its database would grow with every write. Zero means
	// 5 minutes; negative disables this compaction (HistoryBudget's still
	// runs unless it is negative too).
	AutoCompactionRetention time.Duration
	// HistoryBudget bounds the key history by space, whatever the time
	// AutoCompactionRetention allows. etcd keeps every version of every key
	// written, in its database and in an index in memory, until a
	// compaction; a busy node writes tens of thousands of versions a
	// second, so minutes of them could outgrow QuotaBackendBytes, and etcd
	// then refuses every write of the cluster until an operator compacts,
	// defragments and disarms its alarm. While the database's pages in use
	// pass HistoryBudget, the member, if it leads, compacts away the older
	// half of the history it keeps, every few seconds, down to the last
	// minHistory. Zero means DefaultHistoryBudget; negative, no bound.
	HistoryBudget int64
	// QuotaBackendBytes bounds etcd's database; past it etcd refuses writes
	// (alarm NOSPACE). Zero means 4 GiB (etcd's own default is 2 GiB).
	QuotaBackendBytes int64
	// MaxTxnOps bounds the operations of one transaction. Zero means
	// EmbeddedMaxTxnOps, above etcd's default of 128: the group committer
	// packs more actors' writes into one transaction, and so into one
	// fsync. A node using this member must give the store the same bound
	// (EmbeddedLimits).
	MaxTxnOps int
	// HeartbeatInterval and ElectionTimeout are raft's timings (etcd's
	// defaults: 100 ms and 1 s). Losing the leader costs an election AND
	// a lease extension of ElectionTimeout on promotion, so the election
	// timeout adds twice to the failover of a node whose member led.
	// Zero: EmbeddedHeartbeat and EmbeddedElection.
	HeartbeatInterval time.Duration
	ElectionTimeout   time.Duration
	// RaftLogEntries is how many applied raft entries the member keeps in
	// memory after each of its snapshots (etcd's snapshot-catchup-entries),
	// for followers that lag: one further behind is sent the whole
	// database instead. A member alone has no follower, yet etcd's default,
	// 5,000 entries, sized for its own transactions of up to 128
	// operations, kept a node's group commits (up to 1,024 operations, tens
	// of KB each under workflow load) in memory: about 300 MB for as long
	// as the node ran. Zero: EmbeddedRaftLogAlone for a member alone, else
	// etcd's default, which a cluster's followers catch up from after a
	// restart.
	RaftLogEntries uint64
	// SnapshotCount is how many raft entries the member applies between
	// two snapshots to disk (etcd's snapshot-count); a restart replays the
	// entries of its log since the last one. Zero: EmbeddedSnapshotCount.
	SnapshotCount uint64
	// UnsafeNoFsync, for tests only, is etcd's --unsafe-no-fsync: the
	// member does not fsync its log or database. A stop or crash of the
	// process loses nothing (the writes are in the OS's page cache), a
	// crash of the machine may; each commit no longer waits on the disk.
	UnsafeNoFsync bool
}

// Raft log entries an embedded member keeps in memory
// (EmbeddedConfig.RaftLogEntries): alone, a few, since raft reads none of
// them back; in a cluster, etcd's default.
const (
	EmbeddedRaftLogAlone   = 100
	EmbeddedRaftLogCluster = 5000
)

// EmbeddedSnapshotCount is the raft entries an embedded member applies
// between two snapshots to disk: a tenth of etcd's 10,000, which it sizes
// for its own entries, of up to 128 operations. A group commit here is
// one entry of up to 1,024 (tens of KB under workflow load), and a member
// restarted after a crash replays its log from its last snapshot before it
// serves: 6,000 entries of 60 KB took it 1.06 s, 0.48 s with a snapshot
// every 1,000 (a member alone). In a cluster a restarted member's time is
// what it missed while down, which this does not change (docs/deploy.md).
// A snapshot of a member is small (etcd's data is in its database, which
// the snapshot commits, not copies).
const EmbeddedSnapshotCount = 1000

// Raft timings of an embedded member: half of etcd's defaults. Members run
// beside the nodes on one LAN, where round trips are well under a
// millisecond (etcd asks for an election timeout of 10x the round trip and
// more), and a shorter election shortens the failover of the leader's node.
const (
	EmbeddedHeartbeat = 50 * time.Millisecond
	EmbeddedElection  = 500 * time.Millisecond
)

// DefaultHistoryBudget is the database size in use past which an
// embedded member shortens its key history: a sixteenth of the default
// quota, which leaves the rest to live data, and keeps etcd's index of
// versions in memory to a few hundred MB.
const DefaultHistoryBudget = 256 << 20

// compactCheck is how often the compactor samples the head revision and,
// leading, compares the database with the budget; compactionBatch is how
// many revisions etcd deletes from its database per batch (etcd's
// default, 1,000 per 10 ms, deletes fewer a second than a busy node
// writes).
const (
	compactCheck    = 2 * time.Second
	compactionBatch = 10_000
)

// minHistory is the history the compactor always keeps: a watch that lags
// by less resumes without a re-list, and a write whose outcome was in
// doubt is read back at the revision where its claim ended, for up to 15 s
// after (runtime's resolveWait).
var minHistory = 30 * time.Second

// maxSamples bounds the compactor's samples of the head revision: an hour
// of them.
const maxSamples = int(time.Hour / compactCheck)

// EmbeddedMaxTxnOps is the transaction op bound of an embedded member.
const EmbeddedMaxTxnOps = 1024

// EmbeddedLimits are the store limits that fit an embedded member.
func EmbeddedLimits() storage.Limits {
	l := storage.DefaultLimits()
	l.MaxTxnOps = EmbeddedMaxTxnOps
	return l
}

// DefaultEmbeddedConfig returns the configuration of a node that runs
// alone, with its data in dir.
func DefaultEmbeddedConfig(dir string) EmbeddedConfig {
	return EmbeddedConfig{
		Name:                    "default",
		Dir:                     dir,
		ClientURL:               "http://127.0.0.1:2379",
		PeerURL:                 "http://127.0.0.1:2380",
		AutoCompactionRetention: 5 * time.Minute,
		QuotaBackendBytes:       4 << 30,
	}
}

// DefaultLocalEmbeddedConfig is DefaultEmbeddedConfig on free loopback
// ports, for tests and benchmarks.
func DefaultLocalEmbeddedConfig(dir string) EmbeddedConfig {
	c := DefaultEmbeddedConfig(dir)
	c.ClientURL = "http://127.0.0.1:0"
	c.PeerURL = "http://127.0.0.1:0"
	return c
}

func (c *EmbeddedConfig) validate() error {
	d := DefaultEmbeddedConfig(c.Dir)
	if c.Dir == "" {
		return errors.New("etcdstore: EmbeddedConfig.Dir is required")
	}
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.ClientURL == "" {
		c.ClientURL = d.ClientURL
	}
	if c.PeerURL == "" {
		c.PeerURL = d.PeerURL
	}
	if c.AutoCompactionRetention == 0 {
		c.AutoCompactionRetention = d.AutoCompactionRetention
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = d.QuotaBackendBytes
	}
	if c.HistoryBudget == 0 {
		// Never past a quarter of a small quota: etcd would refuse writes
		// before the history shrank.
		c.HistoryBudget = DefaultHistoryBudget
		if c.QuotaBackendBytes > 0 {
			c.HistoryBudget = min(c.HistoryBudget, c.QuotaBackendBytes/4)
		}
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = EmbeddedMaxTxnOps
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = EmbeddedHeartbeat
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = EmbeddedElection
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = EmbeddedSnapshotCount
	}
	if c.RaftLogEntries == 0 {
		c.RaftLogEntries = EmbeddedRaftLogCluster
		if c.alone() {
			c.RaftLogEntries = EmbeddedRaftLogAlone
		}
	}
	if c.ElectionTimeout < 5*c.HeartbeatInterval {
		return fmt.Errorf("etcdstore: ElectionTimeout %v is under 5 heartbeats (%v)", c.ElectionTimeout, c.HeartbeatInterval)
	}
	switch c.InitialClusterState {
	case "", embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
	default:
		return fmt.Errorf("etcdstore: InitialClusterState %q is neither new nor existing", c.InitialClusterState)
	}
	return nil
}

// alone says whether the member forms a cluster of its own: no other
// member in InitialCluster, and not joining a running cluster.
func (c *EmbeddedConfig) alone() bool {
	return c.InitialClusterState != embed.ClusterStateFlagExisting && !strings.Contains(strings.Trim(c.InitialCluster, ", "), ",")
}

// Embedded is an etcd member running in this process.
type Embedded struct {
	etcd    *embed.Etcd
	closing *atomic.Bool
	log     *zap.Logger
	// stopCompactor ends the compactor (if any); compactorDone closes
	// when it has returned.
	stopCompactor context.CancelFunc
	compactorDone chan struct{}
}

// StartEmbedded starts an etcd member and returns once it serves clients
// (under a second for a single member) or ctx is done.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	cu, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: ClientURL: %w", err)
	}
	pu, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: PeerURL: %w", err)
	}
	acu, apu := cu, pu
	if cfg.AdvertiseClientURL != "" {
		if acu, err = url.Parse(cfg.AdvertiseClientURL); err != nil {
			return nil, fmt.Errorf("etcdstore: AdvertiseClientURL: %w", err)
		}
	}
	if cfg.AdvertisePeerURL != "" {
		if apu, err = url.Parse(cfg.AdvertisePeerURL); err != nil {
			return nil, fmt.Errorf("etcdstore: AdvertisePeerURL: %w", err)
		}
	}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*acu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*apu}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	}
	if cfg.InitialClusterState != "" {
		ec.ClusterState = cfg.InitialClusterState
	}
	if cfg.AutoCompactionRetention > 0 {
		ec.AutoCompactionMode = embed.CompactorModePeriodic
		ec.AutoCompactionRetention = cfg.AutoCompactionRetention.String()
	}
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.CompactionBatchLimit = compactionBatch
	ec.MaxTxnOps = uint(cfg.MaxTxnOps)
	ec.TickMs = uint(cfg.HeartbeatInterval.Milliseconds())
	ec.ElectionMs = uint(cfg.ElectionTimeout.Milliseconds())
	ec.SnapshotCatchUpEntries = cfg.RaftLogEntries
	ec.SnapshotCount = cfg.SnapshotCount
	lg := zap.NewNop()
	closing := new(atomic.Bool)
	if cfg.Logger != nil {
		lg = memberLogger(cfg.Logger, closing)
	}
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		m := &Embedded{etcd: e, closing: closing, log: lg, compactorDone: make(chan struct{})}
		cctx, cancel := context.WithCancel(context.Background())
		m.stopCompactor = cancel
		if cfg.HistoryBudget > 0 {
			go m.compactor(cctx, cfg.HistoryBudget)
		} else {
			close(m.compactorDone)
		}
		return m, nil
	case err := <-e.Err():
		closeUnready(e)
		return nil, fmt.Errorf("etcdstore: etcd failed to start: %w", err)
	case <-ctx.Done():
		closeUnready(e)
		return nil, fmt.Errorf("etcdstore: etcd not ready: %w", ctx.Err())
	}
}

// memberLogger is the logger of an embedded member, on base. etcd logs
// every step of its life at info: it keeps warnings and up, each warning
// the first time and then once a minute while it repeats, and every error
// (rationMemberLog). A
// clean Close logs errors too ("use of closed network connection"), so
// once closing is set nothing more is logged.
//
// Some of etcd's warnings come once per raft message or request: a leader
// logs "dropped internal Raft message since sending buffer is full" for
// each message to a peer that does not read them, as a member restarted
// after a crash does while it replays its log (2,450 lines in 4 s, in a
// soak of three nodes whose one was killed), and a loaded member logs
// "apply request took too long" for each slow request (over a hundred a
// minute). Others come every few seconds for as long as a peer is dead.
// The cost: another request's slow line within the minute is not logged
// (its count is, on the next).
func memberLogger(base *zap.Logger, closing *atomic.Bool) *zap.Logger {
	return base.WithOptions(zap.IncreaseLevel(WarningsAndUp(base.Core())), zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &mutableCore{Core: rationMemberLog(ShortFields(c), memberLogPeriod), muted: closing}
	})).Named("etcd")
}

// WarningsAndUp is the level of etcd's logs, the server's and the
// client's (warnings and up, which etcd's info chatter about every step of
// its life is not), for a logger of core: zap.IncreaseLevel(zap.WarnLevel)
// is refused by a core that logs only errors already, and zap then writes
// its complaint ("failed to IncreaseLevel ...") to stderr, plain text,
// every time.
func WarningsAndUp(core zapcore.Core) zapcore.LevelEnabler {
	return zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= zap.WarnLevel && core.Enabled(l) })
}

// closeUnready closes a member that never became ready (it waits for its
// peers, say). embed.Etcd.Close waits first for its client servers to
// end, which wait for the member to be ready or to stop: stopping the
// server first lets Close return, which it otherwise never did (a node
// stopped with SIGTERM while its member waited for peers hung for ever).
func closeUnready(e *embed.Etcd) {
	e.Server.Stop()
	e.Close()
}

// Endpoints returns the client URLs of the member, with the real ports.
func (e *Embedded) Endpoints() []string {
	out := make([]string, 0, len(e.etcd.Clients))
	for _, l := range e.etcd.Clients {
		out = append(out, "http://"+l.Addr().String())
	}
	return out
}

// Client returns a client that calls the member in this process directly
// (etcd's v3client): the same server API and the same raft path as a
// client over the member's socket, without marshalling every request and
// response through gRPC and loopback TCP. Under workflow load that path
// cost a node about a tenth of its CPU. The client stays valid until the
// member closes; close it first.
func (e *Embedded) Client() *clientv3.Client { return v3client.New(e.etcd.Server) }

// KVClient returns the member's KV API called in this process, for
// WithKVClient: what Client's KV calls underneath.
func (e *Embedded) KVClient() pb.KVClient {
	return adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.etcd.Server))
}

// LeaderChanges tells of the member's raft leader, for WithLeaderChanges.
func (e *Embedded) LeaderChanges() LeaderChanges { return e.etcd.Server }

// Quorum reports whether the member knows a raft leader (its cluster has
// a quorum that reaches it) and how many members its cluster has.
func (e *Embedded) Quorum() (leader bool, members int) {
	return e.etcd.Server.Leader() != 0, len(e.etcd.Server.Cluster().Members())
}

// Err reports a fatal error of the running member (its listeners failed).
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the member and waits until it has stopped. In a cluster,
// the other members carry on without it.
func (e *Embedded) Close() error {
	e.stopCompactor()
	<-e.compactorDone
	e.closing.Store(true)
	e.etcd.Close()
	return nil
}

// revSample is the head revision at a time.
type revSample struct {
	at  time.Time
	rev int64
}

// compactor keeps the database within budget by shortening the key
// history while this member leads (a compaction, a raft request, applies
// on every member), until ctx ends. It samples the head revision every
// compactCheck whether it leads or not, so a new leader knows the
// revisions' ages at once.
func (e *Embedded) compactor(ctx context.Context, budget int64) {
	defer close(e.compactorDone)
	t := time.NewTicker(compactCheck)
	defer t.Stop()
	var samples []revSample
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		samples, err = e.compactOnce(ctx, budget, samples, time.Now())
		if err != nil && ctx.Err() == nil {
			e.log.Warn("compacting the key history failed", zap.Int64("budget_bytes", budget), zap.Error(err))
		}
	}
}

// compactOnce records the head revision in samples and, if this member
// leads and the database's pages in use exceed budget, compacts to the
// middle sample of those at least minHistory old (the older half of the
// history kept goes). It returns the samples not compacted away.
func (e *Embedded) compactOnce(ctx context.Context, budget int64, samples []revSample, now time.Time) ([]revSample, error) {
	s := e.etcd.Server
	kv := s.KV()
	head, first := kv.Rev(), kv.FirstRev()
	samples = append(samples, revSample{now, head})
	for len(samples) > 0 && samples[0].rev <= first {
		samples = samples[1:]
	}
	if len(samples) > maxSamples {
		// Nothing compacted for an hour (no periodic compaction, and the
		// database within budget): older samples only make the halving
		// coarser at the start.
		samples = slices.Delete(samples, 0, len(samples)-maxSamples)
	}
	if s.Leader() != s.MemberID() || s.Backend().SizeInUse() <= budget {
		return samples, nil
	}
	old := 0 // samples at least minHistory old
	for old < len(samples) && !samples[old].at.After(now.Add(-minHistory)) {
		old++
	}
	if old == 0 {
		return samples, nil
	}
	target := samples[old/2].rev
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// Physical: wait until the versions are deleted, so that the next
	// check sees the pages they freed.
	if _, err := s.Compact(cctx, &pb.CompactionRequest{Revision: target, Physical: true}); err != nil && !errors.Is(err, mvcc.ErrCompacted) {
		return samples, err
	}
	return samples[old/2+1:], nil
}
