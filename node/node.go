package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/cluster"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/buildinfo"
	"github.com/rivet-go/rivet/internal/ration"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
)

// Node is a running node. Make it with Start; stop it with Stop.
//
// A node can fail on its own while it runs: its etcd or a listener fails,
// or another process started under its node ID takes over
// (runtime.ErrReplaced: it then holds no lease, so no partition). It
// cannot go on serving and never recovers; it reports NOT_SERVING (gRPC
// health, /readyz), Done is closed and Err says why. A program that embeds a node with Start, rather than Run, must
// watch Done, as it would an embedded etcd's or a gRPC server's errors,
// and Stop the node (and usually exit, for its supervisor to restart it):
//
//	n, err := node.Start(ctx, cfg, reg)
//	...
//	select {
//	case <-ctx.Done():
//	case <-n.Done():
//		log.Print(n.Err())
//	}
//	err = errors.Join(n.Err(), n.Stop(stopCtx))
type Node struct {
	cfg Config
	log *zap.Logger
	// levels changes the logger's level while the node runs (nil if
	// Config.LogLevel is).
	levels *levelControl
	// typesSaid is what checkTypes last logged of the actor types the
	// registered nodes register differently ("" for none); watchCluster's
	// goroutine only.
	typesSaid string

	// dirLock is held on <data-dir>/node.lock for the node's life: one
	// node per data directory.
	dirLock   *fileutil.LockedFile
	embedded  *etcdstore.Embedded
	etcd      *clientv3.Client
	store     storage.Store
	committer *storage.Committer
	own       *Ownership
	host      *runtime.Host
	gossip    *cluster.Cluster
	peers     *server.PeerServer
	srv       *server.Server
	// unaryCalls counts the unary gRPC calls in progress (awaitGraceful).
	unaryCalls atomic.Int64
	// closing is set as the stop refuses new work: the gRPC server serves
	// on until the host's requests in progress have ended, but only the
	// peers' streams and health (refuseWhileClosing).
	closing atomic.Bool
	// watchesEnd ends the health Watch streams (endWatches, as the stop
	// stops serving): the health server sends them NOT_SERVING, but ends
	// none, and GracefulStop waits for every stream.
	watchesEnd context.Context
	endWatches context.CancelFunc
	view       *view
	balancer   *runtime.Balancer
	// balanceCancel stops the balancer before the rest, so that a node
	// going away does not start handing partitions off one by one.
	balanceCancel context.CancelFunc
	// balanceAbort cancels the handoffs under way, which a graceful stop
	// lets finish (stopBalancerGracefully).
	balanceAbort context.CancelFunc
	balanceDone  chan struct{}
	// formatRecorded: the newest storage format whose cluster record
	// (storage.FormatKey) this node has written or found, each older one
	// with it (gateFormats; watchCluster's goroutine).
	formatRecorded int
	// formatWriting is the newest storage format the node writes, as it
	// last set its host (gateFormats).
	formatWriting int
	// formats holds each storage format's gate, by format (gateFormats).
	formats [runtime.StorageFormat + 1]formatGate
	// clusterFormat is the storage format of the build that created the
	// cluster (clusterConfig.CreatedFormat).
	clusterFormat int
	// claimed counts every partition claimed (the balancer's, a lease's
	// after a loss, a refence's), handedOff those handed to another.
	claimed, handedOff atomic.Uint64
	// metrics receives the runtime's and the committer's observations.
	metrics *metrics
	// hostStarted and hostStopped tell closeAll whether the host needs
	// stopping (a Start that failed after starting it).
	hostStarted, hostStopped bool
	// handlersLeft: the stop ran out of time with gRPC handlers still
	// running (awaitGraceful), which closeAll does not wait for.
	handlersLeft bool
	served       chan struct{} // closed when grpcServer.Serve returned
	lateUntil    time.Time     // the end of awaitLate's grace (stop's goroutine only)

	grpcServer *grpc.Server
	grpcLis    net.Listener
	health     *health.Server
	// readyMu orders the changes of the health status; readyEpoch counts
	// the lease losses, so that a wait for the partitions to settle that
	// a later loss overtook does not turn the node SERVING.
	readyMu    sync.Mutex
	readyEpoch uint64
	httpServer *http.Server
	httpLis    net.Listener
	// grpcBound and httpBound are grpcLis and httpLis, which bound their
	// connections, for the metrics (httpBound nil without HTTP).
	grpcBound, httpBound *boundedListener
	// readTimeouts counts the calls the request read timeout dropped
	// (requestReadTimedOut).
	readTimeouts     atomic.Uint64
	readTimeoutsWarn ration.Every
	// startWait is what a starting node waits for (etcd, its partitions),
	// which /healthz and /readyz say; nil once Start has succeeded.
	startWait atomic.Pointer[string]
	// collecting is set once the node's parts exist for its collector to
	// read: /metrics serves from the start, with etcd's and Go's series.
	collecting atomic.Bool
	// alarmCli is n.etcd, for the collector's alarm reads (alarms), set
	// once Start has made it: /metrics serves while Start runs.
	alarmCli atomic.Pointer[clientv3.Client]
	alarms   alarmCache
	// hasMember is set once n.embedded has started, for /metrics to
	// serve its etcd_* series.
	hasMember atomic.Bool

	// bgCancel stops the background tasks (committer, lease keep-alive);
	// bg waits for them.
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	// done is closed by the first error of a background task that must
	// stop the node (etcd died, a listener failed, another process took
	// the node ID over), which err then holds, or at the end of Stop.
	// stopping: Stop has begun, and what tasks return now is no failure.
	doneMu   sync.Mutex
	done     chan struct{}
	err      error
	stopping bool

	stopOnce sync.Once
	stopErr  error

	// drainChecked, a test hook (nil otherwise), runs in a drain of this
	// node between its check that another node is eligible and its write.
	drainChecked func()

	// tracer is where the node's spans go (nil: tracing is off, and
	// nothing of it is installed); stopTracing flushes and stops the
	// provider the node made for Config.OTLPEndpoint (nil if it made
	// none).
	tracer      trace.TracerProvider
	stopTracing func(context.Context) error
}

// Ownership is the runtime's ownership, aliased so that callers of node
// need not import runtime for it.
type Ownership = runtime.Ownership

// Run starts a node, serves until ctx is done or the node fails (Done),
// then stops it cleanly, and returns the failure (Err) with what the stop
// could not do. A ctx done while the node starts (SIGTERM, Ctrl-C) stops
// it too, and is no failure: Run returns nil. With a Config from
// ParseFlags under --log-format json, Run logs the error it returns at
// ERROR ("exiting on an error", with the node's ID once known), and
// ExitStatus writes it no more; at INFO if it is only the fatal error the
// node logged at ERROR as it failed. A logger that drops ERROR (a
// program's zap.NewNop) leaves it to ExitStatus, so that a failure never
// exits unsaid.
func Run(ctx context.Context, cfg Config, reg *rivet.Registry) (err error) {
	// id is the node's ID once known: without --node-id, Start reads it
	// from the data directory (or makes it).
	id := cfg.NodeID
	// failLogged: err is only the node's fatal error, which fail logged.
	failLogged := false
	if cfg.logJSON && cfg.Logger != nil {
		defer func() {
			if err == nil || !cfg.Logger.Core().Enabled(zapcore.ErrorLevel) {
				return
			}
			fields := []zap.Field{zap.Error(err)}
			if id != "" {
				fields = append(fields, zap.String("node", id))
			}
			if failLogged {
				cfg.Logger.Info("exiting on an error", fields...)
			} else {
				cfg.Logger.Error("exiting on an error", fields...)
			}
			_ = cfg.Logger.Sync()
			err = loggedError{err}
		}()
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	n, err := Start(ctx, cfg, reg)
	if err != nil {
		if se := (startErr{}); errors.As(err, &se) {
			id, failLogged = se.id, se.logged
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Start gave up because it was asked to stop, and has
			// undone what it had begun. A start that failed for another
			// reason meanwhile (a port in use) is still a failure.
			cfg.Logger.Info("stopped while starting", zap.String("node", id), zap.NamedError("cause", err))
			return nil
		}
		return err
	}
	id = n.cfg.NodeID
	select {
	case <-ctx.Done():
	case <-n.Done():
		n.log.Info("stopping after a fatal error")
	}
	sctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	stopErr := n.Stop(sctx)
	failErr := n.Err()
	failLogged = failErr != nil && stopErr == nil
	return errors.Join(failErr, stopErr)
}

// startErr is Start's error with what Run's exit line needs: the node's
// ID, once Start knew it, and whether fail logged the error already.
type startErr struct {
	id     string
	logged bool
	error
}

func (e startErr) Unwrap() error { return e.error }

// The etcd client's message bounds: room for the largest transaction the
// committer builds, and for large reads.
const (
	etcdMaxSend = 4 << 20
	etcdMaxRecv = 64 << 20
)

// etcdConnectParams are the external etcd client's reconnection timings:
// an attempt every second at most once a connection is lost. With gRPC's
// defaults (1 s, then 1.6 times longer after each failed attempt, up to 2
// minutes), a node whose etcd was down for a while tried again only
// seconds to minutes after etcd was back (8 s after a 12 s outage, up to 2
// minutes after a long one), serving nothing meanwhile. One attempt a
// second per endpoint costs nothing worth saving.
var etcdConnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// sampleEtcdClientLog keeps the first of each of the etcd client's
// messages (by level and text) a minute and drops the rest. The client
// logs a warning for every request that fails ("retrying of unary invoker
// failed"): while etcd is unreachable, one for each call that needs it,
// which is a line or more a second per busy caller, for as long as the
// outage lasts. The node says itself when etcd becomes unreachable and
// when it is back (watchEtcd); a line a minute of the client's shows the
// outage goes on. The cost: a different failure under the same text
// within that minute (a permission refused, say) is not logged. Long
// fields are cut, as the embedded member's are.
func sampleEtcdClientLog(c zapcore.Core) zapcore.Core {
	return zapcore.NewSamplerWithOptions(etcdstore.ShortFields(c), time.Minute, 1, 0)
}

// watchEtcd logs, at the etcd client's connection's changes, when etcd
// becomes unreachable (no endpoint could be connected to: gRPC's
// TRANSIENT_FAILURE, which a connection lost and made again at once never
// reaches) and when it is reachable again, once each per outage. What the
// node logs otherwise says what the outage costs (its lease lost, its
// actors' writes failing), not what it is, and etcd's client's own lines
// are sampled (sampleEtcdClientLog). It returns when ctx is done.
func (n *Node) watchEtcd(ctx context.Context, cc *grpc.ClientConn, endpoints []string) {
	var since time.Time // when etcd became unreachable; zero while it is not
	for state := cc.GetState(); ; state = cc.GetState() {
		switch {
		case state == connectivity.TransientFailure && since.IsZero():
			since = time.Now()
			n.log.Warn("etcd unreachable", zap.Strings("endpoints", endpoints))
		case state == connectivity.Ready && !since.IsZero():
			n.log.Info("etcd reachable again", zap.Duration("unreachable_for", time.Since(since).Round(time.Millisecond)))
			since = time.Time{}
		}
		if !cc.WaitForStateChange(ctx, state) {
			return
		}
	}
}

// quorumPoll is how often watchQuorum asks the member for its leader.
const quorumPoll = 500 * time.Millisecond

// leaderlessWarnAfter is how long a member goes without a leader before
// the node warns: an election takes about one election timeout (500 ms).
var leaderlessWarnAfter = 2 * time.Second // a variable for tests

// watchQuorum logs when the embedded member has had no raft leader for
// leaderlessWarnAfter (its cluster has lost quorum: a majority of the
// members cannot reach each other) and when it has one again, once each
// per outage. Without a leader etcd answers nothing: the node can renew no
// lease and commit nothing, and its log said only what that cost ("lease
// lost", "commit failed"), the cause being among etcd's own warnings (a
// user trial, two of three members killed). The member is reachable, so
// watchEtcd's "etcd unreachable" does not say it. It returns when ctx is
// done.
func (n *Node) watchQuorum(ctx context.Context, quorum func() (bool, int), every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var since time.Time // when the member lost its leader; zero while it has one
	warned := false
	for {
		leader, members := quorum()
		switch {
		case !leader && since.IsZero():
			since = time.Now()
		case !leader && !warned && time.Since(since) >= leaderlessWarnAfter:
			warned = true
			n.log.Warn("etcd has no leader: its cluster has lost quorum (a majority of its members must reach each other); until it has one this node renews no lease and commits nothing",
				zap.Int("etcd_members", members), zap.Int("needed", members/2+1), zap.Duration("without_leader_for", time.Since(since).Round(time.Millisecond)))
		case leader && !since.IsZero():
			if warned {
				n.log.Info("etcd has a leader again", zap.Duration("without_leader_for", time.Since(since).Round(time.Millisecond)))
			}
			since, warned = time.Time{}, false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start starts a node and returns once it serves.
func Start(ctx context.Context, cfg Config, reg *rivet.Registry) (_ *Node, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	n.watchesEnd, n.endWatches = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.closeAll()
			// For Run's exit line: the ID, which no --node-id gave, and
			// whether fail logged err already (a failure meanwhile).
			logged := n.Err() != nil && errors.Is(err, n.Err())
			if (cfg.NodeID == "" && n.cfg.NodeID != "") || logged {
				err = startErr{n.cfg.NodeID, logged, err}
			}
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	// Before the node ID and etcd's files are read: a second node on this
	// directory would run under the same node ID, and its embedded etcd
	// waited for ever, silently and deaf to ctx, for the database lock
	// the first one holds.
	lockPath := filepath.Join(cfg.DataDir, dataDirLock)
	if n.dirLock, err = fileutil.TryLockFile(lockPath, os.O_WRONLY|os.O_CREATE, 0o644); err != nil {
		if errors.Is(err, fileutil.ErrLocked) {
			return nil, fmt.Errorf("node: data dir %s is in use by another running node (%s is locked): each node needs its own --data-dir", cfg.DataDir, lockPath)
		}
		return nil, fmt.Errorf("node: lock data dir: %w", err)
	}
	if n.cfg.NodeID == "" {
		if n.cfg.NodeID, err = loadNodeID(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	n.log = n.log.With(zap.String("node", n.cfg.NodeID))
	if cfg.LogLevel != nil {
		n.levels = newLevelControl(*cfg.LogLevel, n.log)
	}
	sec, err := n.loadSecurity()
	if err != nil {
		return nil, err
	}
	if n.tracer, n.stopTracing, err = startTracing(ctx, n.cfg); err != nil {
		return nil, err
	}

	// Listeners first, so that a port in use fails fast and ":0" resolves
	// to the address the node advertises.
	if n.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("node: grpc listen: %w", err)
	}
	if cfg.HTTPAddr != "-" {
		if n.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("node: http listen: %w", err)
		}
	}
	// Each connection holds a file descriptor from its accept, before
	// any token or certificate is checked: without a bound, anyone who
	// reaches a port could take every descriptor the process may open
	// (a client opening 20,000 idle connections did it in 9 s), and the
	// embedded etcd, out of them, stops the process ("failed to purge wal
	// file: too many open files"). Past the bound, connections wait in
	// the kernel's accept queue.
	grpcConns, httpConns := connLimits()
	if n.cfg.maxGRPCConns > 0 {
		grpcConns = n.cfg.maxGRPCConns
	}
	if n.cfg.maxHTTPConns > 0 {
		httpConns = n.cfg.maxHTTPConns
	}
	n.grpcBound = newBoundedListener(n.grpcLis, "grpc", grpcConns, n.log)
	n.grpcLis = n.grpcBound
	if n.httpLis != nil {
		n.httpBound = newBoundedListener(n.httpLis, "http", httpConns, n.log)
		n.httpLis = n.httpBound
	}
	// Served from here, not once the node serves: a start can wait for
	// as long as etcd does not answer or is out of space, and a liveness
	// probe of /healthz that got no answer meanwhile restarted the node
	// in a loop, its embedded member with it (the member the operator
	// needs to disarm an alarm through, or its peers need for a quorum).
	n.metrics = newMetrics()
	n.waitFor("etcd")
	if n.httpLis != nil {
		n.startHTTP()
	}

	endpoints := cfg.EtcdEndpoints
	var restore restored // the snapshot's leases to revoke, if a restore left them
	if len(endpoints) == 0 {
		ec := etcdstore.DefaultEmbeddedConfig(filepath.Join(cfg.DataDir, "etcd"))
		ec.Name = n.cfg.NodeID
		ec.ClientURL = "http://" + cfg.EtcdClientAddr
		ec.PeerURL = "http://" + cfg.EtcdPeerAddr
		if cfg.EtcdAdvertiseClientAddr != "" {
			ec.AdvertiseClientURL = "http://" + cfg.EtcdAdvertiseClientAddr
		}
		if cfg.EtcdAdvertisePeerAddr != "" {
			ec.AdvertisePeerURL = "http://" + cfg.EtcdAdvertisePeerAddr
		}
		ec.InitialCluster = cfg.EtcdInitialCluster
		ec.InitialClusterState = cfg.EtcdInitialClusterState
		ec.HistoryBudget = cfg.EtcdHistoryBudget
		if cfg.EtcdQuota != 0 {
			ec.QuotaBackendBytes = cfg.EtcdQuota
		}
		ec.Logger = n.log
		if cfg.EtcdRestoreFrom != "" {
			n.waitFor("etcd's data to be restored from " + cfg.EtcdRestoreFrom)
			restore, err = n.restoreEtcd(ec, cfg.EtcdRestoreFrom)
		} else {
			restore, err = n.pendingRestore(ec)
		}
		if err != nil {
			return nil, err
		}
		n.waitFor("the embedded etcd member to start (a member of several waits for a quorum of them to start)")
		t0 := time.Now()
		if n.embedded, err = etcdstore.StartEmbedded(ctx, ec); err != nil {
			return nil, fmt.Errorf("node: %w%s", err, memberStartHint(err, n.cfg.NodeID))
		}
		endpoints = n.embedded.Endpoints()
		n.hasMember.Store(true)
		n.log.Info("embedded etcd ready", zap.Strings("endpoints", endpoints), zap.Duration("took", time.Since(t0)))
	}
	if n.embedded != nil {
		// The node's own member, called in process: the same member a
		// socket client would reach (its only endpoint), at less CPU.
		n.etcd = n.embedded.Client()
		// Before this node reads which nodes are registered and who owns
		// what: the old cluster's, whose addresses it would forward to.
		if restore.revokedAll != nil {
			n.warnRestoredWithLess(ctx, securityOf(cfg))
			if err := etcdstore.RevokeRestoredLeases(ctx, n.etcd, restore.leases); err != nil {
				return nil, fmt.Errorf("node: --etcd-restore-from: %w", err)
			}
			// Before the node's first write, which the old cluster's
			// NOSPACE alarm, if the backup holds one, would refuse.
			if k, err := etcdstore.DisarmForeignAlarms(ctx, n.etcd); err != nil {
				n.log.Warn("the restored snapshot's alarms could not be checked; if etcd refuses writes, deactivate them (docs/deploy.md, \"etcd out of space\")", zap.Error(err))
			} else if k > 0 {
				n.log.Warn("deactivated the NOSPACE alarms the restored snapshot held of the cluster it was taken from (out of space there)", zap.Int("alarms", k))
			}
			if err := restore.revokedAll(); err != nil {
				// Revoked all the same: a start that finds them unnoted
				// revokes them again, which is no error.
				n.log.Warn("the restored snapshot's leases are revoked, but noting it failed", zap.Error(err))
			}
			n.log.Info("the restored snapshot's leases revoked, with its nodes' records", zap.Int("leases", len(restore.leases)))
		}
	} else if n.etcd, err = clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      n.log.Named("etcd-client").WithOptions(zap.IncreaseLevel(etcdstore.WarningsAndUp(n.log.Core())), zap.WrapCore(sampleEtcdClientLog)),
		// Room for the largest transaction the committer builds.
		MaxCallSendMsgSize: etcdMaxSend,
		MaxCallRecvMsgSize: etcdMaxRecv,
		TLS:                sec.etcd,
		DialOptions:        []grpc.DialOption{grpc.WithConnectParams(etcdConnectParams)},
		// A connection that stops answering without closing (a frozen
		// etcd process or host, whose kernel still acknowledges every
		// byte) is given up after 10 s without a byte from it (gRPC's
		// least ping interval for a client; etcd's own least, its
		// --grpc-keepalive-min-time, is 5 s by default) and 3 s without
		// an answer to a ping: its requests fail (a write's caller hears
		// that its outcome is unknown), and the client moves on to
		// another member. Without pings they waited for their deadlines
		// (a write 30 s, and a call with none for that long), and part of
		// every request went to a hung member until TCP gave up, minutes
		// later.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	}); err != nil {
		return nil, fmt.Errorf("node: etcd client: %w", err)
	}
	n.alarmCli.Store(n.etcd)
	var storeOpts []etcdstore.Option
	if n.embedded != nil {
		storeOpts = append(storeOpts, etcdstore.WithLimits(etcdstore.EmbeddedLimits()), etcdstore.WithLeaderChanges(n.embedded.LeaderChanges()),
			etcdstore.WithKVClient(n.embedded.KVClient()))
	} else {
		kv, callOpts, err := etcdstore.ClientKV(n.etcd, etcdMaxSend, etcdMaxRecv)
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		storeOpts = append(storeOpts, etcdstore.WithTermProbe(), etcdstore.WithKVClient(kv, callOpts...))
	}
	st, err := etcdstore.New(n.etcd, cfg.EtcdPrefix, storeOpts...)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.store = st

	n.waitFor("etcd's first answer")
	cc, err := n.firstContact(ctx, endpoints)
	if err != nil {
		return nil, err
	}
	n.waitFor("the node to register and claim its partitions")
	parts := cc.Partitions
	n.clusterFormat = cc.CreatedFormat
	if err := checkStorageFormats(ctx, n.store, runtime.StorageFormat); err != nil {
		return nil, err
	}
	if parts != cfg.Partitions {
		n.log.Warn("the cluster's partition count differs from the configured one (--partitions); the cluster's, fixed at its creation, wins", zap.Uint32("cluster", parts), zap.Uint32("configured", cfg.Partitions))
	}

	bgCtx, bgCancel := context.WithCancel(context.Background())
	n.bgCancel = bgCancel
	ccfg := storage.DefaultCommitterConfig()
	ccfg.Observer = n.metrics
	// The host, made below, claims again the partitions of writes in
	// doubt; none can be in doubt before it exists (only it writes fenced).
	var host atomic.Pointer[runtime.Host]
	ccfg.OnInDoubt = func(fences []storage.Fence) {
		if h := host.Load(); h != nil {
			h.InDoubt(fences)
		}
	}
	n.committer = storage.NewCommitter(n.store, ccfg)
	n.goBackground("committer", func() error { return n.committer.Run(bgCtx) })
	if n.embedded == nil {
		n.goBackground("etcd-watch", func() error { n.watchEtcd(bgCtx, n.etcd.ActiveConnection(), endpoints); return nil })
	} else {
		n.goBackground("etcd-quorum", func() error { n.watchQuorum(bgCtx, n.embedded.Quorum, quorumPoll); return nil })
	}

	advertise := cfg.AdvertiseAddr
	if advertise == "" {
		advertise = n.grpcLis.Addr().String()
	}
	httpAddr := advertisedHTTP(n.HTTPAddr(), advertise)
	rec := runtime.NodeRecord{NodeID: n.cfg.NodeID, GRPCAddr: advertise, HTTPAddr: httpAddr, StartedAt: time.Now().UTC(), StorageFormat: runtime.StorageFormat, Security: securityOf(cfg), Build: buildinfo.String(), ActorTypes: reg.Names()}
	if cfg.GossipAddr != "-" {
		gc := cluster.Config{
			NodeID: n.cfg.NodeID, BindAddr: cfg.GossipAddr, AdvertiseAddr: cfg.GossipAdvertiseAddr,
			Join: cfg.Join, GossipKey: cfg.GossipKey, Profile: cfg.GossipProfile,
			Meta:   cluster.Meta{GRPCAddr: advertise, HTTPAddr: httpAddr},
			Logger: n.log.Named("gossip"),
		}
		if n.gossip, err = cluster.Start(gc); err != nil {
			return nil, fmt.Errorf("node: gossip: %w", err)
		}
		rec.GossipAddr = n.gossip.GossipAddr()
	}
	// No partition is claimed here: the balancer claims what the ring
	// gives this node once it sees the cluster.
	if err := awaitSameSecurity(ctx, n.store, rec, n.log); err != nil {
		return nil, err
	}
	n.own = runtime.NewOwnership(n.store, rec, cfg.LeaseTTL, n.log)
	// Every claim, not only the balancer's: a lease back after a loss
	// claims again what it held, and a refence what it released.
	n.own.OnClaimed(func(_ context.Context, parts []uint32) { n.claimed.Add(uint64(len(parts))) })
	if err := n.own.Establish(ctx, nil); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.goBackground("lease", func() error { return n.own.Run(bgCtx) })

	rc := cfg.Runtime
	rc.NodeID, rc.Partitions, rc.Logger = n.cfg.NodeID, parts, n.log
	rc.Observer = n.metrics
	if n.tracer != nil {
		rc.TracerProvider = n.tracer
	}
	if n.host, err = runtime.New(rc, reg, n.store, n.committer, n.own); err != nil {
		return nil, err
	}
	host.Store(n.host)
	// Until the node has seen every node's record (watchCluster): a node
	// of an older build may load what this one writes.
	n.host.SetWriteFormat(1)
	// One source for the limits both layers enforce: the runtime's config.
	limits := server.DefaultLimits()
	limits.MaxResultBytes, limits.MaxMessageBytes, limits.MaxArgsBytes = rc.MaxResultBytes, rc.MaxMessageBytes, rc.MaxArgsBytes
	limits.MaxInputBytes = rc.MaxInputBytes
	n.view = newView(n.cfg.NodeID, parts, n.store, n.log.Named("view"), sec.peer, limits)
	n.view.traced = n.tracer != nil
	n.view.gossip, n.view.host = n.gossip, n.host
	n.view.leaseTTL = n.cfg.LeaseTTL
	n.host.SetRemote(remote{n.view})
	n.host.SetOwnerLookup(func(p uint32) string { o, _ := n.view.ownerOf(p); return o })
	n.host.SetTypeHolders(n.view.typeHolders)
	if err := n.host.Start(ctx); err != nil {
		return nil, err
	}
	n.hostStarted = true
	n.goBackground("owners-mirror", func() error { return n.view.owners.Run(bgCtx) })
	n.goBackground("nodes-mirror", func() error { return n.view.nodes.Run(bgCtx) })
	n.goBackground("peer-watch", func() error { n.view.watchPeers(bgCtx, peerWatchEvery); return nil })
	n.balancer = runtime.NewBalancer(runtime.BalancerConfig{
		Eligible: n.view.eligible, Draining: n.view.draining, Owners: n.view.ownerTable, Handoffs: cfg.Handoffs,
		OwnerRecord: n.view.ownerOf,
		Registered:  func() storage.LeaseID { rec, _ := n.view.record(n.cfg.NodeID); return rec.Lease },
		OnMoved:     func(_, out int) { n.handedOff.Add(uint64(out)) }, // claims: OnClaimed
	}, n.host, n.own)
	// A lease back after a cut says etcd serves again: the view's copies,
	// which may be waiting seconds to retry it, read it now (routing and
	// the balancer go by them), before the balancer looks.
	n.own.OnEstablished(func() {
		n.view.owners.Kick()
		n.view.nodes.Kick()
	})
	n.own.OnEstablished(n.balancer.Kick)
	n.host.SetWants(n.balancer.Wants)

	// First in the chain: every unary call counts, forwarded ones too.
	countCalls := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		n.unaryCalls.Add(1)
		defer n.unaryCalls.Add(-1)
		return handler(ctx, req)
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(countCalls, server.UnaryInterceptor(n.log))}
	// The token check comes before the interceptors of ServerOptions,
	// which refuse a request that does not decode (a caller without the
	// token must learn nothing but that), and before forwarding: nothing
	// is forwarded unauthenticated. Its statuses are small already, so
	// they need no bounding.
	opts = append(opts, sec.server...)
	opts = append(opts, server.ServerOptions(limits)...)
	// After the token check: a caller without the token learns nothing,
	// not even that the node stops.
	opts = append(opts, grpc.ChainUnaryInterceptor(n.refuseWhileClosing, server.ForwardingInterceptor(n.view)))
	opts = append(opts, grpc.ChainStreamInterceptor(n.refuseStreamsWhileClosing))
	if n.tracer != nil {
		// A stats handler, not an interceptor: its span begins before
		// the token check and the forwarding, which it then covers,
		// and the forwarded request carries its context.
		opts = append(opts, grpc.StatsHandler(tracing.ServerHandler(n.tracer)))
	}
	n.grpcServer = grpc.NewServer(opts...)
	srv := server.New(backend{n.host, n}, server.WithLimits(limits), server.WithLogger(n.log), server.WithRouter(n.view))
	srv.Register(n.grpcServer)
	n.srv = srv
	n.peers = server.NewPeerServer(srv).LimitResponses(limits.MaxForwardedResponseBytes())
	if n.tracer != nil {
		n.peers.Trace(n.tracer)
	}
	n.peers.Register(n.grpcServer)
	hs := health.NewServer()
	// NOT_SERVING (and /readyz 503) until the partitions settle below:
	// the health server starts out SERVING.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	n.readyMu.Lock() // a task that fails meanwhile reads it (fail)
	n.health = hs
	n.readyMu.Unlock()
	healthpb.RegisterHealthServer(n.grpcServer, n.health)
	reflection.Register(n.grpcServer)
	// Not in n.bg: a stopped server's Serve returns only once its
	// handlers have, which a stop that ran out of time does not wait for
	// (closeAll).
	n.served = make(chan struct{})
	go func() {
		defer close(n.served)
		if err := n.grpcServer.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.fail(fmt.Errorf("grpc serve: %w", err))
		}
	}()
	n.collecting.Store(true)
	if n.embedded != nil {
		n.goBackground("etcd", func() error {
			select {
			case err := <-n.embedded.Err():
				return fmt.Errorf("embedded etcd: %w", err)
			case <-bgCtx.Done():
				return nil
			}
		})
	}
	// Health follows the lease: a node that lost it serves nothing until
	// it has a lease again and has claimed what the ring gives it, as at
	// start (load balancers and compose see it at once). Registered before
	// settling, so that a loss during it is not missed.
	n.own.OnLost(n.notServing)
	n.own.OnEstablished(func() {
		epoch := n.epoch()
		// Not in the callback: it runs in the lease's loop.
		n.goBackground("ready", func() error { n.serveWhenSettled(bgCtx, epoch); return nil })
	})
	epoch := n.epoch()
	n.waitFor("its partitions to settle")
	if err := n.settle(ctx, bgCtx); err != nil {
		return nil, err
	}
	n.startWait.Store(nil)
	n.setServing(epoch)
	n.log.Info("node serving", zap.String("build", buildinfo.String()), zap.Int("storage_format", runtime.StorageFormat), zap.String("grpc", n.GRPCAddr()), zap.String("http", n.HTTPAddr()), zap.Uint32("cluster_partitions", parts), zap.Int("partitions_owned", n.own.Owned()))
	return n, nil
}

// waitFor notes what the starting node waits for, for /healthz and
// /readyz to say.
func (n *Node) waitFor(what string) { n.startWait.Store(&what) }

func (n *Node) goBackground(name string, fn func() error) {
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		if err := fn(); err != nil {
			n.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// fail records the node's first fatal error and closes done, unless the
// node has failed already or is stopping (a task's error on its way out
// of a stop is none: Stop returns what went wrong).
func (n *Node) fail(err error) {
	n.doneMu.Lock()
	failed := false
	select {
	case <-n.done:
	default:
		failed = !n.stopping
	}
	if failed {
		n.err = err
		close(n.done)
	}
	n.doneMu.Unlock()
	if !failed {
		return
	}
	// A load balancer or an orchestrator's probe stops sending it work:
	// it serves nothing any more, and says SERVING no longer.
	n.notServing()
	// Logged here, not only by Run: a program that embeds the node and
	// does not watch Done would otherwise never hear of it.
	n.log.Error("fatal error: the node no longer serves and must be stopped", zap.Error(err))
}

// Done is closed once the node has failed (Err says why: it no longer
// serves, and must be stopped) or Stop has returned.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is the fatal error that closed Done: nil while the node runs, and
// after a Stop that no failure came before. It wraps runtime.ErrReplaced
// if another process under this node's ID took over.
func (n *Node) Err() error {
	n.doneMu.Lock()
	defer n.doneMu.Unlock()
	return n.err
}

func (n *Node) startHTTP() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newCollector(n))
	// Whether the node runs a member is known only once it has started
	// it, after the HTTP server (which serves from Start's beginning).
	withMember := prometheus.Gatherers{reg, embeddedEtcdMetrics}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if n.hasMember.Load() {
			return withMember.Gather()
		}
		return reg.Gather()
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	// Liveness: the process is up, starting or serving. A start that
	// waits says for what, in the body only: the status stays 200.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if what := n.startWait.Load(); what != nil {
			fmt.Fprintf(w, "ok: starting, waiting for %s\n", *what)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		n.readyMu.Lock()
		hs := n.health // nil until the node's gRPC server exists
		n.readyMu.Unlock()
		if hs != nil {
			if res, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{}); err == nil && res.Status == healthpb.HealthCheckResponse_SERVING {
				fmt.Fprintln(w, "ok")
				return
			}
		}
		msg := "not serving"
		if what := n.startWait.Load(); what != nil {
			msg += ": starting, waiting for " + *what
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
	})
	idle := n.cfg.httpIdleTimeout
	if idle <= 0 {
		idle = httpIdleTimeout
	}
	// Every endpoint answers at once from memory and reads no body: the
	// timeouts bound only a slow or vanished caller. Without IdleTimeout
	// (or ReadTimeout, which it falls back to) a kept-alive connection
	// waits for its next request for ever, one per scraper or prober that
	// went without a reset.
	n.httpServer = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idle,
	}
	n.goBackground("http", func() error {
		if err := n.httpServer.Serve(n.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http serve: %w", err)
		}
		return nil
	})
}

// httpIdleTimeout is how long the HTTP server keeps a connection that
// sends no next request: more than the interval of any scraper or prober
// that would reuse it (Prometheus scrapes every 15 s to 1 min).
const httpIdleTimeout = 90 * time.Second

// GRPCAddr is the address the gRPC server listens on.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// HTTPAddr is the address of the metrics and health server ("" if off).
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// advertisedHTTP is the metrics and health address a node tells others:
// bound, the HTTP listener's address; bound to every address (0.0.0.0,
// ::), the advertised gRPC address's host with the HTTP port, since no one
// dials [::] (rivetctl members showed it for every node of a compose
// cluster).
func advertisedHTTP(bound, advertise string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return bound
	}
	ahost, _, err := net.SplitHostPort(advertise)
	if err != nil || ahost == "" {
		return bound
	}
	if ip := net.ParseIP(ahost); ip != nil && ip.IsUnspecified() {
		return bound
	}
	return net.JoinHostPort(ahost, port)
}

// ID is the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Host is the node's actor host.
func (n *Node) Host() *runtime.Host { return n.host }

// Stop stops the node cleanly: refuse new calls, finish the calls in
// progress, flush, resign ownership, close etcd; Done is closed when it
// returns. It is idempotent, and also what a node that failed needs.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.doneMu.Lock()
		n.stopping = true
		n.doneMu.Unlock()
		// First, so that the stop logs at the level the node was started
		// with, not at a debug meant for a while (closeAll's call, for a
		// start that fails, then finds nothing pending).
		if n.levels != nil {
			n.levels.stop()
		}
		n.stopErr = n.stop(ctx)
		n.doneMu.Lock()
		select {
		case <-n.done:
		default:
			close(n.done)
		}
		n.doneMu.Unlock()
	})
	return n.stopErr
}

// maxStuckActionsLogged bounds the actions a stop that ran out of time
// names (those running longest): a node stopped under load may hold
// thousands.
const maxStuckActionsLogged = 5

// stuckStreamGrace is how long a stop waits for Subscribe streams once
// nothing else is left (see awaitGraceful).
const stuckStreamGrace = time.Second

// awaitLate waits for done, what a stop that ran out of time cancelled
// (it comes if its code heeds its context), until runtime.StopGrace after
// the stop's first such wait. It reports whether done came.
func (n *Node) awaitLate(done <-chan struct{}) bool {
	if n.lateUntil.IsZero() {
		n.lateUntil = time.Now().Add(runtime.StopGrace)
	}
	t := time.NewTimer(time.Until(n.lateUntil))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// awaitGraceful waits for the gRPC server's graceful stop, or ctx (then it
// stops the server hard). A Subscribe stream whose subscriber stopped
// reading would hold the graceful stop until ctx ends, its handler blocked
// in a send that only closing the connection ends: once the host has
// stopped, no unary call is in progress and only such streams are left
// for stuckStreamGrace, the server stops hard, which closes them.
func (n *Node) awaitGraceful(ctx context.Context, graceful, hostStopped <-chan struct{}) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var stuckSince time.Time
	for {
		select {
		case <-graceful:
			return
		case <-ctx.Done():
			// Stop cancels the handlers' contexts and (WaitForHandlers)
			// waits for them to return. A handler in a turn whose code
			// ignores its context would hold it, and the whole stop past
			// its deadline, for as long as that code runs: it is left
			// running instead (its turn's commit fails, the host having
			// stopped; its caller's connection is closed).
			go n.grpcServer.Stop()
			if !n.awaitLate(graceful) {
				n.handlersLeft = true
				// Named, the first few: an operator fixes that code.
				running, total := n.host.RunningActions(maxStuckActionsLogged)
				names := make([]string, len(running))
				for i, r := range running {
					names[i] = r.String()
				}
				n.log.Warn("the stop ran out of time with calls still running whose actions ignore their context: leaving them",
					zap.Int("actions_running", total), zap.Strings("longest_running", names))
			}
			return
		case now := <-tick.C:
			select {
			case <-hostStopped:
			default:
				continue
			}
			if !n.onlyStreamsLeft() {
				stuckSince = time.Time{}
				continue
			}
			if stuckSince.IsZero() {
				stuckSince = now
				continue
			}
			if now.Sub(stuckSince) >= stuckStreamGrace {
				n.log.Warn("streams whose clients stopped reading (event subscribers, backups) hold up the stop: closing their connections", zap.Int64("streams", n.srv.Streams()))
				n.grpcServer.Stop()
				<-graceful
				return
			}
		}
	}
}

// onlyStreamsLeft says whether Subscribe streams are all the gRPC server is
// still serving: no unary call (this node's own or forwarded by it) and no
// request forwarded to it is in progress.
func (n *Node) onlyStreamsLeft() bool {
	return n.unaryCalls.Load() == 0 && n.peers.Active() == 0 && n.srv.Streams() > 0
}

// servedWhileClosing says whether a call of method is still served once
// the stop refuses new work: the peers' streams, on which the calls that a
// turn in flight here waits for come back through another node (the host
// refuses every other request on them), and health, which answers
// NOT_SERVING.
func servedWhileClosing(method string) bool {
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return service == rivetv1.PeerService_ServiceDesc.ServiceName || service == healthpb.Health_ServiceDesc.ServiceName
}

// closingStatus is the answer to a call that the stop refuses: UNAVAILABLE
// with the node's reason, which clients retry (through another node, if
// they have one), as they did the closed listener's. Its reason,
// node.stopping, says that the node the client reached refused it (a
// forwarded request the owner refuses has the host's own, actor.unavailable):
// a client of several nodes retries it at once on another, which serves
// it, where a backoff (its connection here gets no GOAWAY until the turns
// in flight end) slowed every call that round_robin sent here. A client
// older than the reason reads it as UNAVAILABLE, as before.
func (n *Node) closingStatus() error {
	st, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrUnavailable, "node", "stopping", "node %s is stopping", n.cfg.NodeID))
	return st.Err()
}

// refuseWhileClosing refuses, once the stop refuses new work, a client's
// call that the host would not refuse itself: one this node would forward
// to another, or an admin call. The gRPC server still serves then (see
// stop), and would otherwise take such calls for as long as its turns in
// flight last, and hold up the stop for them.
func (n *Node) refuseWhileClosing(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if n.closing.Load() && !servedWhileClosing(info.FullMethod) {
		return nil, n.closingStatus()
	}
	return handler(ctx, req)
}

// refuseStreamsWhileClosing is refuseWhileClosing for streams: a new
// subscription or backup goes through another node. A health Watch ends
// as the stop stops serving (endWatches), once it has sent NOT_SERVING
// (watchStream.endWhenTold): left alone, it lasts as long as its client
// wants, and held GracefulStop, and the release of the node's partitions
// after it, until the stop's deadline (20 s; a client's gRPC health
// checking watches every node it uses).
func (n *Node) refuseStreamsWhileClosing(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if n.closing.Load() && !servedWhileClosing(info.FullMethod) {
		return n.closingStatus()
	}
	if info.FullMethod == healthpb.Health_Watch_FullMethodName {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		ws := newWatchStream(ss, ctx)
		hs := n.health
		defer context.AfterFunc(n.watchesEnd, func() { ws.endWhenTold(hs, cancel) })()
		return handler(srv, ws)
	}
	return handler(srv, ss)
}

func (n *Node) stop(ctx context.Context) error {
	n.log.Info("stopping")
	// How long each part of the stop took goes in its last log line, so
	// that a stop that takes seconds says what it waited for.
	start := time.Now()
	phase := start
	took := func() time.Duration {
		now := time.Now()
		d := now.Sub(phase)
		phase = now
		return d.Round(time.Millisecond)
	}
	var errs []error
	n.health.Shutdown()
	n.stopBalancerGracefully(ctx)
	if n.gossip != nil {
		// Peers drop this node from their rings now, so they are ready
		// to claim its partitions the moment Resign frees them.
		if err := n.gossip.Leave(2 * time.Second); err != nil {
			n.log.Warn("gossip leave", zap.Error(err))
		}
	}
	leave := took()
	// Refuse new work first: calls that arrive now get UNAVAILABLE, which
	// clients retry elsewhere, instead of hanging on a closing listener.
	n.closing.Store(true)
	drained := n.host.StopRequests()
	hostStopped := make(chan struct{})
	var hostErr error
	go func() { hostErr = n.host.Stop(ctx); close(hostStopped) }()
	// The sends this node forwarded that wait for a completion end their
	// waits now, answering that their messages are queued, rather than
	// hold the graceful stop for up to a wait (30 s by default) and then
	// be broken off. Subscriptions and backups end now too.
	n.view.stopping()
	n.srv.Shutdown()
	// The gRPC server and the peers' streams serve on while requests are
	// in progress on the host: a turn in flight here may wait for a call
	// that comes back to it through another node (A here calls B there,
	// which calls A), which the host lets in, and which only a peer's
	// stream brings. Stopped at once, they held such a chain, and the
	// stop with it, until the other node gave up forwarding (about 11 s),
	// then failed it. Nothing else gets in meanwhile: the host refuses
	// every other request, and refuseWhileClosing every other call.
	select {
	case <-drained:
	case <-hostStopped:
	case <-ctx.Done():
	}
	n.endWatches()
	graceful := make(chan struct{})
	go func() { n.grpcServer.GracefulStop(); close(graceful) }()
	n.peers.Shutdown()
	n.awaitGraceful(ctx, graceful, hostStopped)
	select {
	case <-hostStopped:
		if hostErr != nil {
			errs = append(errs, fmt.Errorf("host stop: %w", hostErr))
		}
	case <-ctx.Done():
		if !n.awaitLate(hostStopped) {
			// The host waits for code that ignores its context: what it
			// still waits for cannot commit any more (its context ended).
			errs = append(errs, fmt.Errorf("host stop: %w", ctx.Err()))
		} else if hostErr != nil {
			errs = append(errs, fmt.Errorf("host stop: %w", hostErr))
		}
	}
	calls := took()
	// A fresh deadline: if stopping the host used up ctx, the claims
	// must still go now rather than a TTL from now.
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := n.own.Resign(rctx); err != nil {
		// Not a failed stop: everything was flushed (or errs says what
		// was not), and the claims go with the lease at its TTL, as a
		// crashed node's do. It happens when the node's etcd has lost its
		// quorum, as the last of a cluster stopped all at once does.
		n.log.Warn("could not give up this node's partitions at once (is etcd reachable, with a quorum?); they move when its lease expires",
			zap.Error(err), zap.Duration("lease_ttl", n.cfg.LeaseTTL))
	}
	rcancel()
	resign := took()
	n.hostStopped = true
	if n.httpServer != nil {
		_ = n.httpServer.Shutdown(ctx)
	}
	n.closeAll()
	n.log.Info("stopped", zap.Duration("took", time.Since(start).Round(time.Millisecond)),
		zap.Duration("gossip_leave", leave), zap.Duration("calls_and_actors", calls),
		zap.Duration("partitions_released", resign), zap.Duration("close", took()))
	_ = n.log.Sync()
	return errors.Join(errs...)
}

// closeAll stops background tasks and closes what Start opened, in reverse.
func (n *Node) closeAll() {
	if n.hostStarted && !n.hostStopped {
		// Start failed after the host started: stop it and give up the
		// claims it may have made, or its goroutines and partitions would
		// outlive the failed start.
		n.stopBalancer()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = n.host.Stop(ctx)
		_ = n.own.Resign(ctx)
		cancel()
		n.hostStopped = true
	}
	if n.grpcServer != nil && n.handlersLeft {
		// Stopped already, with handlers still running (awaitGraceful):
		// another Stop, or PeerServer.Wait, would wait for them.
	} else if n.grpcServer != nil {
		n.grpcServer.Stop()
		if n.peers != nil {
			n.peers.Wait() // every stream has ended with the server
		}
	} else if n.grpcLis != nil {
		n.grpcLis.Close()
	}
	if n.httpServer != nil {
		n.httpServer.Close()
	} else if n.httpLis != nil {
		n.httpLis.Close()
	}
	n.stopBalancer()
	if n.gossip != nil {
		_ = n.gossip.Stop()
	}
	if n.bgCancel != nil {
		n.bgCancel()
	}
	n.bg.Wait()
	if n.served != nil && !n.handlersLeft {
		<-n.served
	}
	if n.view != nil {
		n.view.close()
	}
	if n.stopTracing != nil {
		// After the host and the gRPC server: their last spans have
		// ended, and are flushed with the rest. Bounded, as a collector
		// that is gone would hold the stop for the exporter's timeout.
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		if err := n.stopTracing(ctx); err != nil {
			n.log.Warn("tracing: could not flush the last spans", zap.Error(err))
		}
		cancel()
		n.stopTracing = nil
	}
	if n.store != nil {
		_ = n.store.Close()
	}
	if n.etcd != nil {
		n.etcd.Close()
	}
	if n.embedded != nil {
		n.embedded.Close()
	}
	if n.dirLock != nil {
		n.dirLock.Close()
	}
	if n.levels != nil {
		n.levels.stop()
	}
}

// dataDirLock is the file in the data directory that a running node holds
// locked.
const dataDirLock = "node.lock"

// loadNodeID reads the node ID from dataDir, or makes one and writes it
// there, so that the node keeps its ID across restarts.
func loadNodeID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "node-id")
	if b, err := os.ReadFile(p); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("node: read node id: %w", err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	id := "node-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node: write node id: %w", err)
	}
	return id, nil
}

// clusterConfig is stored at storage.ClusterConfigKey.
type clusterConfig struct {
	Partitions uint32    `json:"partitions"`
	CreatedAt  time.Time `json:"created_at"`
	// CreatedFormat is the storage format of the build that created the
	// cluster (0: a build before this field). A cluster created by a
	// build of format f or newer has had no node of an older format that
	// checked the formats before format f was recorded: formatWait's
	// settle does not apply to f in it (it does to a newer format).
	CreatedFormat int `json:"created_format,omitempty"`
}

// etcdAttempt bounds each try of a node's first call to etcd as it starts
// (firstContact).
const etcdAttempt = 5 * time.Second

// noSpaceWait is how often a starting node whose etcd is out of space
// tries again (the store asks etcd's alarms at most this often anyway).
const noSpaceWait = time.Second

// firstContact returns the cluster's configuration (clusterOf):
// the node's first call to etcd. etcd may not serve yet, its members
// starting in any order with the nodes (docker compose starts them
// together): the node waits for it, until ctx ends, as gossip waits for
// the peers to join, and says so every etcdAttempt with what the etcd
// client last saw. A call in flight waits for etcd without a word and
// without an end (the client waits for a connection): a node pointed at
// a dead --etcd-endpoints hung silent at start, its /healthz unserved.
//
// An etcd out of space (its NOSPACE alarm) is waited out too: it refuses
// clusterOf's write, which it refuses whether or not the key exists, and a
// node that gave up on it exited, taking its embedded member down with it:
// the operator, who frees space and disarms the alarm through a member's
// client port, had none to reach, and no restart could start the node.
func (n *Node) firstContact(ctx context.Context, endpoints []string) (clusterConfig, error) {
	var fullSince, fullSaid time.Time
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, etcdAttempt)
		cc, err := clusterOf(actx, n.store, n.cfg.Partitions)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if errors.Is(err, storage.ErrNoSpace) && ctx.Err() == nil {
			n.waitFor("etcd to have space: it is out of space (alarm NOSPACE); an operator must free space and disarm the alarm (docs/deploy.md, \"etcd out of space\")")
			now := time.Now()
			if fullSince.IsZero() {
				fullSince = now
			}
			if now.Sub(fullSaid) >= etcdAttempt {
				fullSaid = now
				n.log.Warn("etcd is out of space (alarm NOSPACE): the node starts once an operator frees space and disarms the alarm (docs/deploy.md, \"etcd out of space\")",
					zap.Strings("endpoints", endpoints), zap.Duration("waited", now.Sub(fullSince).Round(time.Second)), zap.Error(err))
			}
			attempt--
			select {
			case <-ctx.Done():
				// A stop, not a failure (Run): it matches ctx's error.
				return clusterConfig{}, fmt.Errorf("node: stopped while waiting for etcd to have space (%v): %w", err, ctx.Err())
			case <-time.After(noSpaceWait):
			}
			continue
		}
		if errors.Is(err, storage.ErrNoSpace) { // and ctx ended as etcd answered
			return clusterConfig{}, fmt.Errorf("node: stopped while waiting for etcd to have space (%v): %w", err, ctx.Err())
		}
		if err == nil || !timedOut {
			return cc, err
		}
		n.waitFor(fmt.Sprintf("etcd to answer at %s: it has not for %s (is it up, and are --etcd-endpoints right?)",
			strings.Join(endpoints, ","), time.Duration(attempt)*etcdAttempt))
		n.log.Warn("etcd does not answer yet; still trying (is it up, and are --etcd-endpoints right?)",
			zap.Strings("endpoints", endpoints), zap.Int("attempt", attempt), zap.Duration("waited", time.Duration(attempt)*etcdAttempt), zap.Error(err))
	}
}

// clusterOf returns the cluster's configuration, creating the cluster with
// want partitions if it does not exist yet.
func clusterOf(ctx context.Context, st storage.Store, want uint32) (clusterConfig, error) {
	b, _ := json.Marshal(clusterConfig{Partitions: want, CreatedAt: time.Now().UTC(), CreatedFormat: runtime.StorageFormat})
	stored, _, err := st.PutIfAbsent(ctx, storage.ClusterConfigKey, b)
	if err != nil {
		return clusterConfig{}, fmt.Errorf("node: cluster config: %w", err)
	}
	var cc clusterConfig
	if err := json.Unmarshal(stored, &cc); err != nil || cc.Partitions == 0 {
		return clusterConfig{}, fmt.Errorf("node: cluster config %q is invalid", stored)
	}
	return cc, nil
}

// checkStorageFormats refuses to start a build that does not read every
// storage format the cluster has written (storage.FormatsPrefix): it
// would load what a newer build wrote as if it were its own format, and
// write over it. Builds before format 2's record were not checked, and
// do not check (docs/deploy.md, downgrades). reads is the newest format
// the build reads (runtime.StorageFormat).
func checkStorageFormats(ctx context.Context, st storage.Store, reads int) error {
	fs, err := recordedFormats(ctx, st)
	if err != nil {
		return fmt.Errorf("node: read the cluster's storage formats: %w", err)
	}
	for _, f := range fs {
		if f > reads {
			return fmt.Errorf("node: the cluster's data is in storage format %d, written by a newer build, and this build reads formats up to %d: "+
				"a downgrade past a storage format is not supported; run a build that reads format %d (docs/deploy.md)", f, reads, f)
		}
	}
	return nil
}

// recordedFormats returns the storage formats the cluster has recorded
// (storage.FormatsPrefix), ascending.
func recordedFormats(ctx context.Context, st storage.Store) ([]int, error) {
	kvs, err := st.List(ctx, storage.FormatsPrefix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		return nil, err
	}
	fs := []int{}
	for _, kv := range kvs {
		if f, ok := storage.ParseFormatKey(kv.Key); ok {
			fs = append(fs, f)
		}
	}
	// Keys sort as strings: format 10 before 2.
	slices.Sort(fs)
	return fs, nil
}

// Ownership is the node's lease and partition claims.
func (n *Node) Ownership() *Ownership { return n.own }

// GossipAddr is the node's gossip address ("" without gossip).
func (n *Node) GossipAddr() string {
	if n.gossip == nil {
		return ""
	}
	return n.gossip.GossipAddr()
}

// memberStartHint adds the fix to etcd's words for the two ways a member
// of a multi-member cluster most often fails to start, which name the
// problem in etcd's terms only (a cluster trial).
func memberStartHint(err error, nodeID string) string {
	switch msg := err.Error(); {
	case strings.Contains(msg, "couldn't find local name"):
		return fmt.Sprintf(" (the node's ID, %q, must be one of the member names in --etcd-initial-cluster: set --node-id)", nodeID)
	case strings.Contains(msg, "has already been bootstrapped"):
		return " (this member's data is gone but the cluster still lists it: replace the member as docs/deploy.md says, \"Replacing a member that lost its data\")"
	}
	return ""
}
