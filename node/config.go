package node

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rivet-go/rivet/cluster"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Config is everything a node needs. Zero fields take the defaults of
// DefaultConfig, which run one node alone on loopback.
type Config struct {
	// NodeID names the node in the cluster; it must be unique and stable
	// across restarts (a restarted node revokes its previous run's lease by
	// ID). Empty: read from <DataDir>/node-id, or made and written there.
	NodeID string
	// GRPCAddr is where clients and peers call the node.
	GRPCAddr string
	// AdvertiseAddr is the gRPC address other nodes and clients are told;
	// empty means GRPCAddr.
	AdvertiseAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz. "-" disables it.
	HTTPAddr string
	// DataDir holds the node ID and the embedded etcd's data.
	DataDir string

	// EtcdEndpoints points the node at an external etcd. Empty runs an
	// embedded etcd member in <DataDir>/etcd.
	EtcdEndpoints []string
	// EtcdClientAddr and EtcdPeerAddr are the embedded member's client and
	// peer listen addresses (host:port).
	EtcdClientAddr string
	EtcdPeerAddr   string
	// EtcdAdvertiseClientAddr and EtcdAdvertisePeerAddr are told to other
	// members and clients instead of the listen addresses (needed when
	// those are 0.0.0.0). Empty: the listen addresses.
	EtcdAdvertiseClientAddr string
	EtcdAdvertisePeerAddr   string
	// EtcdPrefix namespaces every key the node writes.
	EtcdPrefix string
	// EtcdInitialCluster makes the embedded member one of a multi-member
	// etcd cluster: name=peerURL,... listing every member (the node ID is
	// this member's name). Empty: a cluster of this member alone. Used only
	// when the member's data directory is new.
	EtcdInitialCluster string
	// EtcdInitialClusterState is "new" (the default: the members listed
	// form a new cluster) or "existing": this member joins a running
	// cluster that already has it as a member (etcdctl member add), as a
	// node whose data directory was lost does once its old member was
	// removed. Used only when the member's data directory is new.
	EtcdInitialClusterState string
	// EtcdHistoryBudget bounds the embedded member's key history by the
	// size of its database in use, beside its 5 minutes
	// (etcdstore.EmbeddedConfig.HistoryBudget): under a sustained load,
	// minutes of history could outgrow etcd's space quota, which stops
	// every write of the cluster. 0: 256 MiB; negative: bounded by time
	// alone. An external etcd's compaction is its operator's
	// (docs/deploy.md).
	EtcdHistoryBudget int64
	// EtcdRestoreFrom, if set, is a snapshot of etcd (rivetctl backup,
	// etcdctl snapshot save) that the embedded member starts from: the
	// node checks the file's hash, restores it into <DataDir>/etcd as a
	// new member (this node's ID and peer URL, EtcdInitialCluster's
	// members), and notes it in the member's directory; a restart with
	// the same snapshot (or the file gone) goes on from that member, one
	// with another is refused. Every member of a cluster restores the same
	// snapshot (docs/deploy.md, "Backup and restore").
	EtcdRestoreFrom string
	// EtcdQuota bounds the embedded member's database (etcd's
	// --quota-backend-bytes); past it etcd refuses every write that puts,
	// cluster-wide, until an operator frees space (docs/deploy.md, "etcd
	// out of space"). 0: 4 GiB. Every member of a cluster should have the
	// same: each refuses by its own. An external etcd's is its operator's.
	EtcdQuota int64
	// httpIdleTimeout, if set, replaces how long the HTTP server keeps a
	// connection that sends no next request (httpIdleTimeout's default):
	// a test hook.
	httpIdleTimeout time.Duration
	// maxGRPCConns and maxHTTPConns, if set, replace the bounds on the
	// connections the node's ports hold at once (connLimits).
	maxGRPCConns, maxHTTPConns int
	// requestReadTimeout, if set, replaces the bound on the time a call's
	// request may take to arrive (server.RequestReadTimeout): a test hook.
	requestReadTimeout time.Duration

	// GossipAddr is the host:port of the memberlist gossip (TCP and UDP).
	// "-" runs the node without gossip: it then balances over the nodes
	// registered in etcd alone, and notices a peer's death only when its
	// lease expires.
	GossipAddr string
	// GossipAdvertiseAddr is the gossip address told to peers; empty means
	// GossipAddr.
	GossipAdvertiseAddr string
	// Join lists gossip addresses of nodes to join; empty starts a cluster.
	Join []string
	// GossipKey encrypts gossip (16, 24 or 32 bytes); empty: plaintext.
	GossipKey []byte
	// GossipProfile picks failure-detection timings (LAN by default).
	GossipProfile cluster.Profile
	// SettleTimeout bounds how long Start waits, when joining a cluster,
	// for gossip to reach a peer and for the first partition claims, before
	// it serves anyway (calls then find their owners as the cluster
	// settles).
	SettleTimeout time.Duration
	// Handoffs bounds the partitions this node hands off at once when the
	// ring changes.
	Handoffs int

	// TLSCertFile and TLSKeyFile (PEM) turn TLS on for the gRPC port: the
	// node serves with this certificate, and presents it as its client
	// certificate when it dials other nodes. Its names (SANs) must cover
	// every host clients and peers dial: the advertised address's host
	// (AdvertiseAddr, or the listen address), and any other name clients
	// use. Under mTLS it needs both server and client use (extended key
	// usage), as `rivetctl certs` makes it. Empty: plaintext. Certificates
	// are read once, at Start.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile turns mTLS on: every client and peer must present a
	// certificate signed by a CA in this file (PEM), or the handshake
	// fails. Needs TLSCertFile. Empty: clients need no certificate.
	TLSClientCAFile string
	// TLSCAFile holds the CAs this node verifies other nodes' certificates
	// with when it dials them. Empty: TLSClientCAFile, or if that is empty
	// too, the system's roots.
	TLSCAFile string
	// Token, when set, must come with every call to the ActorService, the
	// AdminService and the PeerService (and reflection), as metadata
	// "authorization: Bearer <token>", or the call fails UNAUTHENTICATED.
	// The node sends it to its peers, so every node needs the same token.
	// The gRPC health service stays open. Without TLS the token crosses
	// the network in plaintext: use it alone only on a trusted network.
	Token string

	// EtcdCAFile, EtcdCertFile and EtcdKeyFile (PEM) are the client TLS of
	// an external etcd (EtcdEndpoints, which must then be https:// or
	// scheme-less): the CAs that verify etcd's certificate (empty: the
	// system's roots) and the node's client certificate, for an etcd that
	// requires one (--client-cert-auth). The embedded etcd serves
	// plaintext and takes none of them.
	EtcdCAFile   string
	EtcdCertFile string
	EtcdKeyFile  string

	// Partitions is the partition count used if this node creates the
	// cluster; an existing cluster keeps its own.
	Partitions uint32
	// LeaseTTL is how long the node's claims outlive its last lease
	// renewal: the time until another node may take over after a crash.
	// Shorter fails over faster but risks losing claims in a long GC pause
	// or etcd hiccup (which is safe, thanks to fencing, but interrupts).
	LeaseTTL time.Duration
	// ShutdownTimeout bounds a clean stop (drain turns, flush, resign).
	ShutdownTimeout time.Duration

	// Runtime tunes the actor host (NodeID and Partitions are set by the
	// node).
	Runtime runtime.Config
	// Logger receives the node's logs. Nil: a production zap logger (at
	// info, with LogLevel set to its level).
	Logger *zap.Logger
	// logJSON is ParseFlags's --log-format json: Run then logs the error
	// it fails with through Logger too, and ExitStatus does not write it
	// again as plain text (a JSON pipeline cannot parse a plain line, and
	// the start's refusal may be the most important one).
	logJSON bool
	// LogLevel, if set, is the level Logger logs at, which an operator may
	// then change while the node runs (rivetctl log-level; the change is
	// not kept across a restart). Nil: the level cannot change, and the
	// request says so (FAILED_PRECONDITION). ParseFlags sets both.
	//
	// Nodes embedded in one program must each have their own AtomicLevel
	// (and a Logger on it): one shared would make a change on one node
	// (rivetctl log-level --node) change them all, and each node's
	// pending revert would fight the others' (a node's stop reverting the
	// level of nodes still running).
	LogLevel *zap.AtomicLevel

	// OTLPEndpoint turns OpenTelemetry tracing on (docs/deploy.md,
	// "Tracing"): the node sends its spans to an OTLP/gRPC collector at
	// this address, host:port (plaintext) or a URL (http:// plaintext,
	// https:// TLS against the system's roots), in batches, as service
	// "rivet-node" (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override), and flushes what it holds on Stop. The exporter's other
	// OTEL_EXPORTER_OTLP_* variables (headers, timeout) and the sampler's
	// (OTEL_TRACES_SAMPLER) apply. Empty, with TracerProvider nil: no
	// tracing, at no cost to a call.
	OTLPEndpoint string
	// TracerProvider, if set, is where the node's spans go instead
	// (OTLPEndpoint is then ignored): for a program that embeds the node
	// and has a provider of its own, or a test's in-memory one. The node
	// does not shut it down.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns the configuration of a node that runs alone on
// loopback with an embedded etcd in ./data.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:        "127.0.0.1:6420",
		HTTPAddr:        "127.0.0.1:6421",
		DataDir:         "data",
		EtcdClientAddr:  "127.0.0.1:2379",
		EtcdPeerAddr:    "127.0.0.1:2380",
		EtcdPrefix:      "/rivet/",
		Partitions:      placement.DefaultPartitions,
		LeaseTTL:        3 * time.Second,
		GossipAddr:      cluster.DefaultBindAddr,
		GossipProfile:   cluster.ProfileLAN,
		SettleTimeout:   10 * time.Second,
		Handoffs:        4,
		ShutdownTimeout: 20 * time.Second,
		Runtime:         runtime.DefaultConfig(),
	}
}

// DefaultLocalConfig is DefaultConfig on free loopback ports with data in
// dir, for tests and benchmarks. Its ports are 0, so every Start picks new
// ones: a test that restarts a node (Stop, then Start on the same dir) and
// keeps its clients sets GRPCAddr to the first node's GRPCAddr() before the
// second Start.
func DefaultLocalConfig(dir string) Config {
	c := DefaultConfig()
	c.GRPCAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
	c.EtcdClientAddr = "127.0.0.1:0"
	c.EtcdPeerAddr = "127.0.0.1:0"
	c.GossipAddr = "127.0.0.1:0"
	c.GossipProfile = cluster.ProfileLocal
	c.DataDir = dir
	c.Partitions = 64
	return c
}

func (c *Config) validate() error {
	d := DefaultConfig()
	if c.GRPCAddr == "" {
		c.GRPCAddr = d.GRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = d.HTTPAddr
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.EtcdClientAddr == "" {
		c.EtcdClientAddr = d.EtcdClientAddr
	}
	if c.EtcdPeerAddr == "" {
		c.EtcdPeerAddr = d.EtcdPeerAddr
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = d.EtcdPrefix
	}
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	if c.AdvertiseAddr == "" && (len(c.Join) > 0 || c.EtcdInitialCluster != "" || len(c.EtcdEndpoints) > 0) {
		// In a cluster the address is told to the other nodes, which
		// forward calls to it: 0.0.0.0 would send them to themselves.
		if host, _, err := net.SplitHostPort(c.GRPCAddr); err == nil {
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				return fmt.Errorf("node: the gRPC address %q listens on all interfaces, so the address to tell other nodes cannot be guessed: set the advertise address (--advertise-addr)", c.GRPCAddr)
			}
		}
	}
	if c.Runtime.IdleTimeout < 0 {
		// Refused before anything starts, as the flag's is; the runtime
		// refuses it too, but only once etcd and the cluster are up.
		return fmt.Errorf("node: Runtime.IdleTimeout (--idle-timeout) is negative (%v): give a positive duration, or 0 for the default (30s); no value means never (a KeepAwake task keeps an actor in memory)", c.Runtime.IdleTimeout)
	}
	if c.Partitions > 65536 {
		return errors.New("node: Partitions (--partitions) above 65536")
	}
	if c.GossipAddr == "" {
		c.GossipAddr = d.GossipAddr
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = d.SettleTimeout
	}
	if c.Handoffs <= 0 {
		c.Handoffs = d.Handoffs
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.LeaseTTL < time.Second {
		return errors.New("node: LeaseTTL (--lease-ttl) under 1s (etcd leases have second granularity)")
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if err := checkOTLPEndpoint(c.OTLPEndpoint); err != nil {
		return err
	}
	if c.Logger == nil {
		zc := zap.NewProductionConfig()
		l, err := zc.Build()
		if err != nil {
			return err
		}
		c.Logger, c.LogLevel = l, &zc.Level
	}
	return nil
}

// checkOTLPEndpoint refuses an OTLP endpoint the exporter would not use as
// given. It does not fail on one: an address without a port, or a URL
// without a host, goes to localhost:4317, and a scheme other than https
// (grpc://, a typo) to plaintext, so spans went nowhere or in clear text
// and the node said nothing.
func checkOTLPEndpoint(ep string) error {
	if ep == "" {
		return nil
	}
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("node: OTLP endpoint (--otlp-endpoint) %q: %w", ep, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("node: OTLP endpoint (--otlp-endpoint) %q: scheme %q, want host:port, http:// (plaintext) or https:// (TLS)", ep, u.Scheme)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("node: OTLP endpoint (--otlp-endpoint) %q has no host", ep)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(ep)
	if _, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil {
		return fmt.Errorf("node: OTLP endpoint (--otlp-endpoint) %q: want host:port, http://host:port (plaintext) or https://host:port (TLS)", ep)
	}
	return nil
}
