// Command node runs a rivet node hosting the example actors. Alone it needs
// nothing else (an embedded etcd keeps its data in ./data):
//
//	go run ./cmd/node
//
// Every flag has an environment equivalent: --grpc-addr is RIVET_GRPC_ADDR.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rivet-go/rivet/cluster"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed, and asking for it is no failure
		}
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	var (
		etcdEndpoints string
		logLevel      string
		logFormat     string
		join          string
		gossipKey     string
		gossipProfile string
	)
	str(fs, &cfg.NodeID, "node-id", cfg.NodeID, "unique, stable node ID (default: from <data-dir>/node-id, made on first start)")
	str(fs, &cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address")
	str(fs, &cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr, "gRPC address told to clients and other nodes (default: --grpc-addr)")
	str(fs, &cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "metrics and health listen address ('-' to disable)")
	str(fs, &cfg.DataDir, "data-dir", cfg.DataDir, "data directory (node ID, embedded etcd)")
	str(fs, &etcdEndpoints, "etcd-endpoints", "", "comma-separated external etcd endpoints (default: run an embedded etcd)")
	str(fs, &cfg.EtcdClientAddr, "etcd-client-addr", cfg.EtcdClientAddr, "embedded etcd client listen address")
	str(fs, &cfg.EtcdPeerAddr, "etcd-peer-addr", cfg.EtcdPeerAddr, "embedded etcd peer listen address")
	str(fs, &cfg.EtcdAdvertiseClientAddr, "etcd-advertise-client-addr", "", "embedded etcd client address told to others (default: --etcd-client-addr)")
	str(fs, &cfg.EtcdAdvertisePeerAddr, "etcd-advertise-peer-addr", "", "embedded etcd peer address told to other members (default: --etcd-peer-addr)")
	str(fs, &cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of everything the node stores in etcd")
	str(fs, &cfg.EtcdInitialCluster, "etcd-initial-cluster", "", "embedded etcd members of a new multi-member cluster: name=http://host:peerport,... (each name a node ID)")
	str(fs, &cfg.EtcdInitialClusterState, "etcd-initial-cluster-state", "", "new (default), or existing: join a running etcd cluster that already lists this member (after etcdctl member add; see docs/deploy.md)")
	str(fs, &cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist gossip listen address, TCP and UDP ('-' to run without gossip)")
	str(fs, &cfg.GossipAdvertiseAddr, "gossip-advertise-addr", "", "gossip address told to other nodes (default: --gossip-addr)")
	str(fs, &join, "join", "", "comma-separated gossip addresses of nodes to join (default: start a new cluster)")
	secret(fs, &gossipKey, "gossip-key", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip; every node needs the same; prefer the environment")
	str(fs, &gossipProfile, "gossip-profile", "lan", "failure detection timings: lan, or local (fast, for one host)")
	str(fs, &cfg.TLSCertFile, "tls-cert", "", "PEM certificate of the gRPC port (turns TLS on; also the client certificate shown to peers); its names must cover the advertised host")
	str(fs, &cfg.TLSKeyFile, "tls-key", "", "PEM key of --tls-cert")
	str(fs, &cfg.TLSClientCAFile, "tls-client-ca", "", "PEM CAs that sign client and peer certificates: turns mTLS on (every caller needs a certificate)")
	str(fs, &cfg.TLSCAFile, "tls-ca", "", "PEM CAs that verify peers' certificates when this node dials them (default: --tls-client-ca, else the system's roots)")
	secret(fs, &cfg.Token, "token", "bearer `token` every actor, admin and peer call must carry (health excepted); every node needs the same; prefer the environment, which ps does not show")
	str(fs, &cfg.EtcdCAFile, "etcd-ca", "", "PEM CAs that verify an external etcd's certificate (with https:// --etcd-endpoints)")
	str(fs, &cfg.EtcdCertFile, "etcd-cert", "", "PEM client certificate for an external etcd that requires one")
	str(fs, &cfg.EtcdKeyFile, "etcd-key", "", "PEM key of --etcd-cert")
	u32(fs, &cfg.Partitions, "partitions", cfg.Partitions, "partition count of a new cluster (fixed once the cluster exists)")
	dur(fs, &cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "ownership lease TTL: how soon a crashed node's actors can move")
	dur(fs, &cfg.Runtime.IdleTimeout, "idle-timeout", cfg.Runtime.IdleTimeout, "deactivate actors idle this long")
	boolean(fs, &cfg.Runtime.ExposeErrors, "expose-errors", false, "send the text of actions' internal errors to callers")
	str(fs, &logLevel, "log-level", "info", "debug, info, warn or error")
	str(fs, &logFormat, "log-format", "console", "console or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(envErrs) > 0 {
		return errors.Join(envErrs...)
	}
	cfg.EtcdEndpoints = splitList(etcdEndpoints)
	cfg.Join = splitList(join)
	if gossipKey != "" {
		k, err := base64.StdEncoding.DecodeString(gossipKey)
		if err != nil {
			return fmt.Errorf("--gossip-key: not base64: %w", err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("--gossip-key: %d bytes; want 16, 24 or 32 (e.g. head -c 32 /dev/urandom | base64)", n)
		}
		cfg.GossipKey = k
	}
	switch gossipProfile {
	case "lan":
		cfg.GossipProfile = cluster.ProfileLAN
	case "local":
		cfg.GossipProfile = cluster.ProfileLocal
	default:
		return fmt.Errorf("--gossip-profile: %q is neither lan nor local", gossipProfile)
	}
	log, err := newLogger(logLevel, logFormat)
	if err != nil {
		return err
	}
	cfg.Logger = log

	reg, err := examples.Registry()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return node.Run(ctx, cfg, reg)
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "console":
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	default:
		return nil, fmt.Errorf("--log-format: %q is neither console nor json", format)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	return zc.Build()
}

// envName maps a flag name to its environment variable: grpc-addr ->
// RIVET_GRPC_ADDR. The environment sets the default; a flag wins.
func envName(flagName string) string {
	return "RIVET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func str(fs *flag.FlagSet, p *string, name, def, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		def = v
	}
	fs.StringVar(p, name, def, usage+" ["+envName(name)+"]")
}

// secret is str for a value --help must not print as its default.
func secret(fs *flag.FlagSet, p *string, name, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		*p = v
	}
	fs.Func(name, usage+" ["+envName(name)+"]", func(s string) error { *p = s; return nil })
}

// envErrs collects environment values that do not parse: the node refuses
// to start rather than silently use a default.
var envErrs []error

func badEnv(name, v string, err error) {
	envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
}

func u32(fs *flag.FlagSet, p *uint32, name string, def uint32, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			def = uint32(n)
		} else {
			badEnv(name, v, err)
		}
	}
	fs.Func(name, fmt.Sprintf("%s (default %d) [%s]", usage, def, envName(name)), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		*p = uint32(n)
		return err
	})
	*p = def
}

func dur(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		} else {
			badEnv(name, v, err)
		}
	}
	fs.DurationVar(p, name, def, usage+" ["+envName(name)+"]")
}

func boolean(fs *flag.FlagSet, p *bool, name string, def bool, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		} else {
			badEnv(name, v, err)
		}
	}
	fs.BoolVar(p, name, def, usage+" ["+envName(name)+"]")
}
