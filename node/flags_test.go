package node_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet/node"
)

// A node binary of the user's own reads the same flags and RIVET_*
// variables as cmd/node: the environment sets a default, a flag wins.
func TestParseFlagsTakesTheEnvironmentAndFlagsOverIt(t *testing.T) {
	t.Setenv("RIVET_GRPC_ADDR", "127.0.0.1:18620")
	t.Setenv("RIVET_LEASE_TTL", "7s")
	t.Setenv("RIVET_PARTITIONS", "32")
	t.Setenv("RIVET_MAX_QUEUE_DEPTH", "5000")
	t.Setenv("RIVET_MAX_CALL_DEPTH", "16")
	cfg, err := node.ParseFlags("mynode", []string{"--max-call-depth", "32", "--lease-ttl", "9s", "--join", "a:1, b:2", "--log-level", "error"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Runtime.MaxQueueDepth != 5000 {
		t.Fatalf("max queue depth %d from RIVET_MAX_QUEUE_DEPTH=5000", cfg.Runtime.MaxQueueDepth)
	}
	if cfg.Runtime.MaxCallDepth != 32 {
		t.Fatalf("max call depth %d from --max-call-depth 32 over RIVET_MAX_CALL_DEPTH=16", cfg.Runtime.MaxCallDepth)
	}
	if cfg.GRPCAddr != "127.0.0.1:18620" || cfg.LeaseTTL != 9*time.Second || cfg.Partitions != 32 ||
		len(cfg.Join) != 2 || cfg.Join[1] != "b:2" || cfg.Logger == nil {
		t.Fatalf("cfg = addr %q, lease %v, partitions %d, join %q, logger %v", cfg.GRPCAddr, cfg.LeaseTTL, cfg.Partitions, cfg.Join, cfg.Logger)
	}
	def := node.DefaultConfig()
	if cfg.DataDir != def.DataDir || cfg.HTTPAddr != def.HTTPAddr {
		t.Fatalf("unset values moved from the defaults: data dir %q, http %q", cfg.DataDir, cfg.HTTPAddr)
	}
}

func TestParseFlagsRefusesWhatDoesNotParse(t *testing.T) {
	t.Setenv("RIVET_IDLE_TIMEOUT", "soon")
	if _, err := node.ParseFlags("mynode", nil, io.Discard); err == nil || !strings.Contains(err.Error(), "RIVET_IDLE_TIMEOUT") {
		t.Fatalf("ParseFlags = %v, want an error naming RIVET_IDLE_TIMEOUT", err)
	}
	os.Unsetenv("RIVET_IDLE_TIMEOUT") // t.Setenv puts it back after the test
	if _, err := node.ParseFlags("mynode", []string{"--log-level", "error"}, io.Discard); err != nil {
		t.Fatalf("without the bad variable: %v", err)
	}
	for _, args := range [][]string{{"--gossip-profile", "wan"}, {"--gossip-key", "c2hvcnQ="}, {"--log-format", "xml"}, {"--nope"}, {"--max-queue-depth", "-1"}, {"--max-call-depth", "-1"}} {
		if _, err := node.ParseFlags("mynode", args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	// A token or gossip key given blank would run the node without one:
	// refused, whether from a flag or the environment (a flag with a value
	// overrides a blank variable).
	for _, name := range []string{"token", "gossip-key"} {
		for _, blank := range []string{"", " ", "\n"} {
			if _, err := node.ParseFlags("mynode", []string{"--" + name, blank}, io.Discard); err == nil || !strings.Contains(err.Error(), "empty") {
				t.Errorf("--%s %q: %v, want refused as empty", name, blank, err)
			}
		}
		env := "RIVET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		t.Setenv(env, " ")
		if _, err := node.ParseFlags("mynode", nil, io.Discard); err == nil || !strings.Contains(err.Error(), env+" is set but empty") {
			t.Errorf("%s blank: %v, want refused as empty", env, err)
		}
		if _, err := node.ParseFlags("mynode", []string{"--" + name, "MDEyMzQ1Njc4OWFiY2RlZg=="}, io.Discard); err != nil {
			t.Errorf("%s blank, --%s given: %v", env, name, err)
		}
		os.Unsetenv(env)
	}
	// The flag package stops at the first argument that is not a flag,
	// and the flags after it were ignored: a space in a list ran the node
	// on the default ports, not those given.
	for _, args := range [][]string{{"extra"}, {"--join", "a:1,", "b:2", "--grpc-addr", "127.0.0.1:18621"}} {
		if _, err := node.ParseFlags("mynode", args, io.Discard); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Errorf("%q: %v, want refused as an unexpected argument", args, err)
		}
	}
	var usage strings.Builder
	if _, err := node.ParseFlags("mynode", []string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "RIVET_GRPC_ADDR") {
		t.Fatalf("-h: %v, usage:\n%s", err, usage.String())
	}
}

// A negative duration is refused, from a flag or the environment: the
// node ran on the default it was not given (--idle-timeout -5s kept
// actors 30 s) without a word.
func TestParseFlagsRefusesANegativeDuration(t *testing.T) {
	for _, name := range []string{"idle-timeout", "lease-ttl"} {
		_, err := node.ParseFlags("mynode", []string{"--" + name, "-5s"}, io.Discard)
		var fe *node.FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "-"+name) || !strings.Contains(err.Error(), "negative") {
			t.Errorf("--%s -5s: %v, want a flag error naming it as negative", name, err)
		}
		env := "RIVET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		t.Setenv(env, "-5s")
		if _, err := node.ParseFlags("mynode", nil, io.Discard); err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s=-5s: %v, want an error naming it as negative", env, err)
		}
		os.Unsetenv(env)
	}
	cfg, err := node.ParseFlags("mynode", []string{"--idle-timeout", "2m", "--log-level", "error"}, io.Discard)
	if err != nil || cfg.Runtime.IdleTimeout != 2*time.Minute {
		t.Errorf("--idle-timeout 2m: %v, %v", cfg.Runtime.IdleTimeout, err)
	}
}

// The embedded etcd's quota has a flag (a storage trial found none, and
// had to run an external etcd to choose one); one that cannot apply is
// refused, not ignored.
func TestParseFlagsSetsTheEmbeddedEtcdsQuota(t *testing.T) {
	cfg, err := node.ParseFlags("mynode", []string{"--etcd-quota-mb", "8192", "--log-level", "error"}, io.Discard)
	if err != nil || cfg.EtcdQuota != 8<<30 {
		t.Fatalf("--etcd-quota-mb 8192: quota %d, %v; want 8 GiB", cfg.EtcdQuota, err)
	}
	if cfg, err := node.ParseFlags("mynode", []string{"--log-level", "error"}, io.Discard); err != nil || cfg.EtcdQuota != 0 {
		t.Fatalf("no flag: quota %d, %v; want 0 (etcdstore's 4 GiB)", cfg.EtcdQuota, err)
	}
	for _, args := range [][]string{{"--etcd-quota-mb", "-1"}, {"--etcd-quota-mb", "64", "--etcd-endpoints", "http://127.0.0.1:2379"}} {
		var fe *node.FlagError
		if _, err := node.ParseFlags("mynode", args, io.Discard); !errors.As(err, &fe) || !strings.Contains(err.Error(), "etcd-quota-mb") {
			t.Errorf("%q: %v, want a flag error naming -etcd-quota-mb", args, err)
		}
	}
}

// The logger ParseFlags sets up comes with its level, which a node then
// changes while it runs (rivetctl log-level): --log-level is where it
// starts, not where it must stay.
func TestParseFlagsGivesTheLoggersLevelToChange(t *testing.T) {
	cfg, err := node.ParseFlags("mynode", []string{"--log-level", "warn", "--log-format", "json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogLevel == nil || cfg.LogLevel.Level() != zap.WarnLevel {
		t.Fatalf("LogLevel %v after --log-level warn; want warn", cfg.LogLevel)
	}
	if cfg.Logger.Core().Enabled(zap.InfoLevel) {
		t.Fatal("a logger at warn logs info")
	}
	cfg.LogLevel.SetLevel(zap.DebugLevel)
	if !cfg.Logger.Core().Enabled(zap.DebugLevel) {
		t.Fatal("the logger does not follow its LogLevel set to debug")
	}
}

// Under --log-format json a node that cannot start says why in a JSON line
// at ERROR, and the plain "node: ..." line is not written as well: a JSON
// pipeline cannot parse it, and a start refused for its security may be
// the most important line.
func TestAFailureIsLoggedAsJSONUnderLogFormatJSON(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dataDir := t.TempDir()
	args := []string{"--data-dir", dataDir, "--grpc-addr", busy.Addr().String(), "--http-addr", "-", "--gossip-addr", "-"}
	run := func(format string, nop bool, more ...string) (int, string, *observer.ObservedLogs) {
		if len(more) == 0 {
			more = []string{"--node-id", "n1"}
		}
		cfg, err := node.ParseFlags("node", append(append(args, more...), "--log-format", format), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zap.ErrorLevel)
		cfg.Logger = zap.New(core)
		if nop {
			cfg.Logger = zap.NewNop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var stderr bytes.Buffer
		code := node.ExitStatus(&stderr, "node", node.Run(ctx, cfg, nil))
		return code, stderr.String(), logs
	}
	code, stderr, logs := run("json", false)
	got := logs.FilterMessage("exiting on an error").All()
	if code != 1 || stderr != "" || len(got) != 1 || !strings.Contains(got[0].ContextMap()["error"].(string), "address already in use") || got[0].ContextMap()["node"] != "n1" {
		t.Errorf("--log-format json, a busy port: exit %d, stderr %q, logged %+v; want exit 1, nothing plain, one ERROR with the error and the node", code, stderr, logs.All())
	}
	// The console format writes it plain, as before.
	if code, stderr, logs := run("console", false); code != 1 || !strings.HasPrefix(stderr, "node: grpc listen: ") || logs.FilterMessage("exiting on an error").Len() != 0 {
		t.Errorf("--log-format console, a busy port: exit %d, stderr %q, logged %+v", code, stderr, logs.All())
	}
	// Without --node-id the line names the ID the node read from its data
	// directory (or made there), as every other line of the node does.
	code, stderr, logs = run("json", false, "--node-id=")
	got = logs.FilterMessage("exiting on an error").All()
	id, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 || stderr != "" || len(got) != 1 || got[0].ContextMap()["node"] != strings.TrimSpace(string(id)) {
		t.Errorf("--log-format json, no --node-id, a busy port: exit %d, stderr %q, logged %+v; want one ERROR naming the node %s", code, stderr, logs.All(), id)
	}
	// A logger that drops ERROR (a program's zap.NewNop) cannot say it:
	// it is written plain, not lost.
	if code, stderr, _ := run("json", true); code != 1 || !strings.HasPrefix(stderr, "node: grpc listen: ") {
		t.Errorf("--log-format json with a Nop logger, a busy port: exit %d, stderr %q; want exit 1 and the error plain", code, stderr)
	}
	// Nor can a level above ERROR, which zap parses but a node refuses.
	for _, lvl := range []string{"dpanic", "panic", "fatal"} {
		if _, err := node.ParseFlags("node", append(args, "--log-format", "json", "--log-level", lvl), io.Discard); err == nil || !strings.Contains(err.Error(), "--log-level") {
			t.Errorf("--log-level %s: %v; want a --log-level error", lvl, err)
		}
	}
}

// Tracing is off unless asked for: --otlp-endpoint (or RIVET_OTLP_ENDPOINT)
// turns it on, and so does OpenTelemetry's standard variable, the
// traces-only one first, as in any program instrumented with it; the flag
// wins.
func TestParseFlagsTakesTheOTLPEndpoint(t *testing.T) {
	for _, env := range []string{"RIVET_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(env, "")
		os.Unsetenv(env) // t.Setenv puts it back after the test
	}
	parse := func(args ...string) string {
		t.Helper()
		cfg, err := node.ParseFlags("node", args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.OTLPEndpoint
	}
	if got := parse(); got != "" {
		t.Fatalf("OTLP endpoint %q with nothing set, want tracing off", got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
	if got := parse(); got != "http://collector:4317" {
		t.Fatalf("OTLP endpoint %q from OTEL_EXPORTER_OTLP_ENDPOINT", got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:4317")
	if got := parse(); got != "https://traces:4317" {
		t.Fatalf("OTLP endpoint %q, want OTEL_EXPORTER_OTLP_TRACES_ENDPOINT's", got)
	}
	if got := parse("--otlp-endpoint", "127.0.0.1:4317"); got != "127.0.0.1:4317" {
		t.Fatalf("OTLP endpoint %q, want the flag's", got)
	}
	// The environment's endpoint with another protocol than gRPC (the
	// specification's default is http/protobuf) is refused, not sent gRPC
	// that an HTTP port drops; the traces-only variable first.
	for _, env := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	if _, err := node.ParseFlags("node", nil, io.Discard); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: %v; want it refused", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	if got := parse(); got != "https://traces:4317" {
		t.Errorf("OTLP endpoint %q with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc, want the environment's", got)
	}
	if got := parse("--otlp-endpoint", "127.0.0.1:4317"); got != "127.0.0.1:4317" {
		t.Errorf("OTLP endpoint %q, want the flag's whatever the protocol variables say", got)
	}
}
