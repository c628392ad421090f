package node

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/cluster"
	"github.com/rivet-go/rivet/internal/buildinfo"
	"github.com/rivet-go/rivet/runtime"
)

// Main runs a node hosting reg, configured as cmd/node is: by the flags in
// os.Args and the RIVET_* environment variables (ParseFlags), until SIGINT
// or SIGTERM stops it gracefully. It is the whole main of a node binary
// that hosts your own actors:
//
//	func main() { node.Main(rivet.MustSetup(Order, Invoice)) }
//
// It exits the process: with status 0 once the node has stopped (or after
// -h), 2 for a flag that does not parse or an argument that is not a flag
// (written once, pointing at -h), 1 with the error on stderr if it could
// not start or failed (see ExitStatus).
func Main(reg *rivet.Registry) {
	os.Exit(ExitStatus(os.Stderr, progName(), RunMain(os.Args[1:], reg)))
}

// FlagError is a command line that the flag package refused (an unknown
// flag, a value that does not parse), or an argument that is not a flag.
// ParseFlags has written it to its out already (one line, "name: error
// (name -h lists the flags)"): a main that prints the errors it gets
// should not print this one again.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// ExitStatus writes err, from RunMain, ParseFlags or Run, to w as the error
// of the program prog, once, and returns the process's exit status: 0 for
// none (or flag.ErrHelp, whose usage is printed), 2 for a *FlagError,
// which ParseFlags has written already, 1 for any other error, written
// "prog: error" (unless Run logged it already, as JSON under
// --log-format json). This package's errors start "node: "; that prefix is not
// written twice when prog is "node" (cmd/node, or a binary so named).
func ExitStatus(w io.Writer, prog string, err error) int {
	var fe *FlagError
	var le loggedError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &fe):
		return 2
	case errors.As(err, &le):
		return 1
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prog+": ") {
		msg = prog + ": " + msg
	}
	fmt.Fprintln(w, msg)
	return 1
}

// loggedError is an error Run has logged through a JSON logger
// (--log-format json), which ExitStatus does not write again.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// RunMain is Main without the exit: it returns the error, flag.ErrHelp
// after printing the usage for -h, and nil once a signal has stopped the
// node. It sets the process's memory limit from its container's
// (SetMemoryLimit).
func RunMain(args []string, reg *rivet.Registry) error {
	cfg, err := ParseFlags(progName(), args, os.Stderr)
	if err != nil {
		return err
	}
	SetMemoryLimit(cfg.Logger)
	ctx, stop := SignalContext()
	defer stop()
	return Run(ctx, cfg, reg)
}

// SignalContext returns a context that SIGINT or SIGTERM cancels, for Run:
// the first signal stops the node gracefully, and a second one during that
// stop ends the process at once (the signal's default action), as an
// operator who presses Ctrl-C again expects: a stop can take up to its
// 20 s bound, and the signal would otherwise be swallowed until Run
// returns. stop releases the signals, as signal.NotifyContext's does.
// The signals' default action is back before ctx ends: with
// NotifyContext and an AfterFunc that released them, a node could see
// ctx end and log "stopping" before the release ran, and a second signal
// sent then was swallowed (the e2e test of it failed so once, on a loaded
// machine).
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
		}
		signal.Stop(sigs)
		cancel()
	}()
	return ctx, cancel
}

func progName() string {
	if len(os.Args) > 0 {
		name := os.Args[0]
		if i := strings.LastIndexAny(name, `/\`); i >= 0 {
			name = name[i+1:]
		}
		if name != "" {
			return name
		}
	}
	return "node"
}

// ParseFlags returns the Config that the command-line flags in args and
// the RIVET_* environment variables describe, over DefaultConfig: the
// flags of cmd/node, which `-h` lists (usage goes to out). Each flag has
// an environment variable (--grpc-addr is RIVET_GRPC_ADDR) that sets its
// default; a flag given wins. A value that does not parse, or a negative
// duration, from either, is an error naming it: a node refuses to start
// rather than run on a default it was not given. The logger it sets up
// writes to stderr (--log-level, --log-format); colour only on a terminal.
// A flag the flag package refuses is a *FlagError, written to out already
// (-h prints the usage). After -h, or --version (which prints the build on
// stdout), it returns flag.ErrHelp: the caller exits 0 (ExitStatus).
func ParseFlags(name string, args []string, out io.Writer) (Config, error) {
	cfg := DefaultConfig()
	p := &flagParser{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	// The flag package writes a refused flag, then the usage, to the
	// set's output; the error is written below instead, on one line that
	// points at -h: the usage after it (some 70 lines) scrolled it out of
	// sight, leaving the last flag's help where the complaint should be.
	p.fs.SetOutput(io.Discard)
	p.fs.Usage = func() {}
	var (
		etcdEndpoints string
		logLevel      string
		logFormat     string
		join          string
		gossipKey     string
		gossipProfile string
	)
	p.str(&cfg.NodeID, "node-id", cfg.NodeID, "unique, stable node ID (default: from <data-dir>/node-id, made on first start)")
	p.str(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address")
	p.str(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr, "gRPC address told to clients and other nodes (default: --grpc-addr)")
	p.str(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "metrics and health listen address ('-' to disable)")
	p.str(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory (node ID, embedded etcd)")
	p.str(&etcdEndpoints, "etcd-endpoints", "", "comma-separated external etcd endpoints (default: run an embedded etcd)")
	p.str(&cfg.EtcdClientAddr, "etcd-client-addr", cfg.EtcdClientAddr, "embedded etcd client listen address")
	p.str(&cfg.EtcdPeerAddr, "etcd-peer-addr", cfg.EtcdPeerAddr, "embedded etcd peer listen address")
	p.str(&cfg.EtcdAdvertiseClientAddr, "etcd-advertise-client-addr", "", "embedded etcd client address told to others (default: --etcd-client-addr)")
	p.str(&cfg.EtcdAdvertisePeerAddr, "etcd-advertise-peer-addr", "", "embedded etcd peer address told to other members (default: --etcd-peer-addr)")
	p.str(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of everything the node stores in etcd")
	p.str(&cfg.EtcdInitialCluster, "etcd-initial-cluster", "", "embedded etcd members of a new multi-member cluster: name=http://host:peerport,... (each name a node ID)")
	p.str(&cfg.EtcdInitialClusterState, "etcd-initial-cluster-state", "", "new (default), or existing: join a running etcd cluster that already lists this member (after etcdctl member add; see docs/deploy.md)")
	historyMiB, quotaMiB := 0, 0
	p.integer(&historyMiB, "etcd-history-budget-mb", 0, "database size (MiB) past which the embedded etcd shortens its key history, kept 5 minutes otherwise (0: 256; -1: no bound but time)")
	p.str(&cfg.EtcdRestoreFrom, "etcd-restore-from", "", "snapshot file (etcdctl snapshot save, rivetctl backup) the embedded etcd starts from, as a new member, in a --data-dir without one (docs/deploy.md)")
	p.integer(&quotaMiB, "etcd-quota-mb", 0, "size (MiB) of the embedded etcd's database past which etcd refuses writes, cluster-wide, until space is freed (0: 4096; give every node the same)")
	p.str(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr, "memberlist gossip listen address, TCP and UDP ('-' to run without gossip)")
	p.str(&cfg.GossipAdvertiseAddr, "gossip-advertise-addr", "", "gossip address told to other nodes (default: --gossip-addr)")
	p.str(&join, "join", "", "comma-separated gossip addresses of nodes to join (default: start a new cluster)")
	p.secret(&gossipKey, "gossip-key", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip; every node needs the same; prefer the environment")
	p.str(&gossipProfile, "gossip-profile", "lan", "failure detection timings: lan, or local (fast, for one host)")
	p.str(&cfg.TLSCertFile, "tls-cert", "", "PEM certificate of the gRPC port (turns TLS on; also the client certificate shown to peers); its names must cover the advertised host")
	p.str(&cfg.TLSKeyFile, "tls-key", "", "PEM key of --tls-cert")
	p.str(&cfg.TLSClientCAFile, "tls-client-ca", "", "PEM CAs that sign client and peer certificates: turns mTLS on (every caller needs a certificate)")
	p.str(&cfg.TLSCAFile, "tls-ca", "", "PEM CAs that verify peers' certificates when this node dials them (default: --tls-client-ca, else the system's roots)")
	p.secret(&cfg.Token, "token", "bearer `token` every actor, admin and peer call must carry (health excepted); every node needs the same; prefer the environment, which ps does not show")
	p.str(&cfg.EtcdCAFile, "etcd-ca", "", "PEM CAs that verify an external etcd's certificate (with https:// --etcd-endpoints)")
	p.str(&cfg.EtcdCertFile, "etcd-cert", "", "PEM client certificate for an external etcd that requires one")
	p.str(&cfg.EtcdKeyFile, "etcd-key", "", "PEM key of --etcd-cert")
	p.u32(&cfg.Partitions, "partitions", cfg.Partitions, "partition count of a new cluster (fixed once the cluster exists; 0: the default)")
	p.dur(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "ownership lease TTL: how soon a crashed node's actors can move")
	p.dur(&cfg.Runtime.IdleTimeout, "idle-timeout", cfg.Runtime.IdleTimeout, "deactivate actors idle this long, without a turn (a negative one is refused: there is no never, but a KeepAwake task keeps an actor in memory; an actor type's Options.IdleTimeout overrides it)")
	p.integer(&cfg.Runtime.MaxActiveActors, "max-active-actors", cfg.Runtime.MaxActiveActors, "actors in memory past which those idle longest are deactivated early (0: the default; -1: no bound)")
	p.integer(&cfg.Runtime.MaxQueueDepth, "max-queue-depth", cfg.Runtime.MaxQueueDepth, "messages one queue of an actor holds, past which a send is refused (RESOURCE_EXHAUSTED queue.full; 0: the default)")
	p.integer(&cfg.Runtime.MaxCallDepth, "max-call-depth", cfg.Runtime.MaxCallDepth, "calls between actors one call chain nests (A -> B -> A...), past which a call fails (INVALID_ARGUMENT; an actor calling itself without end stops there, not at its deadline; 0: the default)")
	p.integer(&cfg.Runtime.MaxWaitingCalls, "max-waiting-calls", cfg.Runtime.MaxWaitingCalls, "turns waiting for one actor past which a client's call is refused at once, not run (UNAVAILABLE actor.overloaded, which clients retry with backoff; calls actors make wait; 0: the default; -1: no bound)")
	p.boolean(&cfg.Runtime.ExposeErrors, "expose-errors", false, "send the text of actions' internal errors to callers")
	p.boolean(&cfg.Runtime.CheckQueries, "check-queries", false, "fail a read-only action (rivet.Query) that changes its actor's state, and undo the change (costs two encodings of the state a query: for tests and staging)")
	p.str(&logLevel, "log-level", "info", "debug, info, warn or error; rivetctl log-level changes it while the node runs, until a restart (the embedded etcd logs warnings and up, within it; memberlist follows it)")
	p.str(&logFormat, "log-format", "console", "console or json")
	p.str(&cfg.OTLPEndpoint, "otlp-endpoint", otlpEndpointFromEnv(), "OTLP/gRPC collector (host:port, plaintext; or an http:// or https:// URL) to send OpenTelemetry traces to (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT; none: tracing off)")
	refused := func(err error) error {
		fmt.Fprintf(out, "%s: %v (%s -h lists the flags)\n", name, err, name)
		return &FlagError{Err: err}
	}
	showVersion := p.fs.Bool("version", false, "print the build (rivet's version, the commit) and the storage format it writes, and exit")
	if err := p.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			p.fs.SetOutput(out)
			fmt.Fprintf(out, "Usage of %s:\n", name)
			p.fs.PrintDefaults()
			return cfg, err
		}
		return cfg, refused(err)
	}
	if *showVersion {
		// On stdout, for a script's `$(rivet-node --version | head -n1)`,
		// the build alone, as rivetctl members -o json's build; exit 0 as
		// after -h. The storage format on a line of its own: whether the
		// build may run in a cluster, whose recorded formats rivetctl
		// members lists (docs/deploy.md, "Downgrades").
		fmt.Println(buildinfo.String())
		fmt.Printf("storage format %d (reads formats 1 to %d)\n", runtime.StorageFormat, runtime.StorageFormat)
		return cfg, flag.ErrHelp
	}
	for _, d := range p.durs {
		// The flag package takes any duration; a negative one is no
		// value any of these flags can have (the node ran on the
		// default it was not given: --idle-timeout -5s kept actors 30 s).
		if *d.dst < 0 {
			return cfg, refused(fmt.Errorf("invalid value %q for flag -%s: negative duration", d.dst.String(), d.name))
		}
	}
	if cfg.Runtime.MaxQueueDepth < 0 {
		// Taken for the default, as 0 is: say so rather than run on it.
		return cfg, refused(fmt.Errorf("invalid value %d for flag -max-queue-depth: negative", cfg.Runtime.MaxQueueDepth))
	}
	if cfg.Runtime.MaxCallDepth < 0 {
		return cfg, refused(fmt.Errorf("invalid value %d for flag -max-call-depth: negative", cfg.Runtime.MaxCallDepth))
	}
	if rest := p.fs.Args(); len(rest) > 0 {
		// The flag package stops at the first argument that is not a
		// flag: every flag after it would be dropped without a word (a
		// space in "--join a:1, b:2" ran the node on the default ports).
		// A command-line mistake as a bad flag is: exit status 2.
		return cfg, refused(fmt.Errorf("unexpected argument %q (the node takes flags only; every flag after it would be ignored; a list is one argument: --join a:1,b:2)", rest[0]))
	}
	for _, name := range p.emptySecrets {
		p.envErrs = append(p.envErrs, fmt.Errorf("%s is set but empty: unset it to run without one, or give it a value", envName(name)))
	}
	if len(p.envErrs) > 0 {
		return cfg, errors.Join(p.envErrs...)
	}
	cfg.EtcdEndpoints = splitList(etcdEndpoints)
	cfg.EtcdHistoryBudget = int64(historyMiB) << 20
	switch {
	case quotaMiB < 0:
		return cfg, refused(fmt.Errorf("invalid value %d for flag -etcd-quota-mb: negative", quotaMiB))
	case cfg.EtcdRestoreFrom != "" && cfg.EtcdInitialClusterState == "existing":
		return cfg, refused(errors.New("-etcd-restore-from makes a new etcd cluster from the snapshot, which -etcd-initial-cluster-state existing would join a running one: drop one of them"))
	case cfg.EtcdRestoreFrom != "" && len(cfg.EtcdEndpoints) > 0:
		return cfg, refused(errors.New("-etcd-restore-from restores the embedded etcd, and with -etcd-endpoints the node runs none: restore the external etcd with etcdutl snapshot restore"))
	case quotaMiB > 0 && len(cfg.EtcdEndpoints) > 0:
		// It would be ignored without a word: the operator meant a quota.
		return cfg, refused(errors.New("-etcd-quota-mb sets the embedded etcd's quota, and with -etcd-endpoints the node runs none: set the external etcd's --quota-backend-bytes"))
	}
	cfg.EtcdQuota = int64(quotaMiB) << 20
	cfg.Join = splitList(join)
	if gossipKey != "" {
		k, err := base64.StdEncoding.DecodeString(gossipKey)
		if err != nil {
			return cfg, fmt.Errorf("--gossip-key: not base64: %w", err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return cfg, fmt.Errorf("--gossip-key: %d bytes; want 16, 24 or 32 (e.g. head -c 32 /dev/urandom | base64)", n)
		}
		cfg.GossipKey = k
	}
	switch gossipProfile {
	case "lan":
		cfg.GossipProfile = cluster.ProfileLAN
	case "local":
		cfg.GossipProfile = cluster.ProfileLocal
	default:
		return cfg, fmt.Errorf("--gossip-profile: %q is neither lan nor local", gossipProfile)
	}
	log, level, err := newLogger(logLevel, logFormat)
	if err != nil {
		return cfg, err
	}
	if env := otlpEndpointFromEnv(); env != "" && cfg.OTLPEndpoint == env {
		if err := checkOTLPProtocolEnv(); err != nil {
			return cfg, err
		}
	}
	cfg.Logger, cfg.LogLevel = log, &level
	cfg.logJSON = logFormat == "json"
	return cfg, nil
}

// checkOTLPProtocolEnv refuses an OpenTelemetry environment that asks for
// another OTLP protocol than gRPC (http/protobuf is the specification's
// default, and common where these variables are set for every program):
// the node exports over gRPC only, and sent to an HTTP port every span
// would be dropped with no word in the node's log.
func checkOTLPProtocolEnv() error {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := os.Getenv(name); v != "" {
			if v != "grpc" {
				return fmt.Errorf("node: %s is %q: the node exports traces over OTLP/gRPC only (set it to grpc with a gRPC collector endpoint, usually port 4317, or give --otlp-endpoint)", name, v)
			}
			return nil
		}
	}
	return nil
}

// otlpEndpointFromEnv is the collector OpenTelemetry's standard variables
// name, "" if none: they turn tracing on as --otlp-endpoint does, as they
// would in any program instrumented with OpenTelemetry.
func otlpEndpointFromEnv() string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
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

// newLogger returns the node's logger and its level, which an operator
// may change while the node runs (rivetctl log-level).
func newLogger(level, format string) (*zap.Logger, zap.AtomicLevel, error) {
	// Not zapcore.ParseLevel: its fatal, panic and dpanic would drop the
	// ERROR a failing node exits with.
	lvl, err := parseLogLevel(level)
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("--log-level: %w", err)
	}
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
		// Times an operator reads in `docker compose logs` as they are
		// (zap's default is seconds since 1970, as a float), and that log
		// collectors parse as well.
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		zc = zap.NewDevelopmentConfig()
		if term.IsTerminal(int(os.Stderr.Fd())) {
			// Colour codes only where a person reads them: in a file or
			// a log collector they are noise.
			zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
	default:
		return nil, zap.AtomicLevel{}, fmt.Errorf("--log-format: %q is neither console nor json", format)
	}
	// A stack trace on every error made an expected event (a lease lost
	// to a network cut) read as a crash in the JSON logs (a user trial);
	// a panic the node recovers logs its own stack.
	zc.DisableStacktrace = true
	zc.Level = zap.NewAtomicLevelAt(lvl)
	l, err := zc.Build()
	return l, zc.Level, err
}

// flagParser declares flags whose defaults come from the environment.
type flagParser struct {
	fs *flag.FlagSet
	// envErrs collects environment values that do not parse.
	envErrs []error
	// emptySecrets names the secrets whose variable is set but blank and
	// no flag overrides: a node asked for a token or a key, and given
	// none, must not start without one.
	emptySecrets []string
	// durs are the duration flags, none of which may be negative.
	durs []durFlag
}

type durFlag struct {
	name string
	dst  *time.Duration
}

// envName maps a flag name to its environment variable: grpc-addr ->
// RIVET_GRPC_ADDR. The environment sets the default; a flag wins.
func envName(flagName string) string {
	return "RIVET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (p *flagParser) badEnv(name, v string, err error) {
	p.envErrs = append(p.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
}

func (p *flagParser) str(dst *string, name, def, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		def = v
	}
	p.fs.StringVar(dst, name, def, usage+" ["+envName(name)+"]")
}

// secret is str for a value --help must not print as its default.
// A secret given blank (--token "$UNSET", or RIVET_TOKEN= ) is refused:
// taken as not given, it would run the node open without saying so.
func (p *flagParser) secret(dst *string, name, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		*dst = v
		if strings.TrimSpace(v) == "" {
			p.emptySecrets = append(p.emptySecrets, name)
		}
	}
	p.fs.Func(name, usage+" ["+envName(name)+"]", func(s string) error {
		if strings.TrimSpace(s) == "" {
			return fmt.Errorf("empty: leave --%s out to run without one", name)
		}
		*dst = s
		p.emptySecrets = slices.DeleteFunc(p.emptySecrets, func(n string) bool { return n == name })
		return nil
	})
}

func (p *flagParser) u32(dst *uint32, name string, def uint32, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			def = uint32(n)
		} else {
			p.badEnv(name, v, err)
		}
	}
	p.fs.Func(name, fmt.Sprintf("%s (default %d) [%s]", usage, def, envName(name)), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		*dst = uint32(n)
		return err
	})
	*dst = def
}

func (p *flagParser) integer(dst *int, name string, def int, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		} else {
			p.badEnv(name, v, err)
		}
	}
	p.fs.IntVar(dst, name, def, usage+" ["+envName(name)+"]")
}

func (p *flagParser) dur(dst *time.Duration, name string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if d, err := time.ParseDuration(v); err == nil && d < 0 {
			p.badEnv(name, v, errors.New("negative duration"))
		} else if err == nil {
			def = d
		} else {
			p.badEnv(name, v, err)
		}
	}
	p.fs.DurationVar(dst, name, def, usage+" ["+envName(name)+"]")
	p.durs = append(p.durs, durFlag{name, dst})
}

func (p *flagParser) boolean(dst *bool, name string, def bool, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		} else {
			p.badEnv(name, v, err)
		}
	}
	p.fs.BoolVar(dst, name, def, usage+" ["+envName(name)+"]")
}
