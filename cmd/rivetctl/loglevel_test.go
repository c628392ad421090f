package main

import (
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// startTwoNodes starts nodes n1 and n2 of reg on one etcd, each changed
// by with, and returns n1's address.
func startTwoNodes(t *testing.T, reg *rivet.Registry, with func(*node.Config)) string {
	t.Helper()
	endpoints := etcdtest.Start(t)
	var addr string
	for _, id := range []string{"n1", "n2"} {
		n := startLocalNode(t, reg, func(cfg *node.Config) {
			cfg.NodeID, cfg.EtcdEndpoints, cfg.EtcdPrefix = id, endpoints, "/"+t.Name()+"/"
			with(cfg)
		})
		if addr == "" {
			addr = n.GRPCAddr()
		}
	}
	return addr
}

// log-level reads and sets the level of real nodes: the one at --addr,
// another (--node) or every one (--all), for a while (--for), after which
// each sets its level back by itself; a level no node has, and flags
// that do not go together, are usage errors.
func TestLogLevelOfRealNodes(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	levels := map[string]zap.AtomicLevel{}
	addr := startTwoNodes(t, reg, func(cfg *node.Config) {
		lvl := zap.NewAtomicLevelAt(zap.InfoLevel)
		levels[cfg.NodeID] = lvl
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		cfg.Logger, cfg.LogLevel = zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), lvl)), &lvl
	})
	rivetctl(t, addr, "log-level").want(t, 0, "node n1: info\n")
	// n1 lists n2 once its view has n2's registration.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := rivetctl(t, addr, "log-level", "--all")
		if r.code == 0 && r.stdout == "NODE  LEVEL\nn1    info\nn2    info\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log-level --all never listed n1 and n2 at info: exit %d, %q, %q", r.code, r.stdout, r.stderr)
		}
	}

	// Long enough to be seen whatever the machine's load; the revert is
	// checked after with a short one.
	r := rivetctl(t, addr, "log-level", "debug", "--all", "--for", "1m")
	set := regexp.MustCompile(`^NODE  LEVEL\nn1    info -> debug until \S+Z \(then info\)\nn2    info -> debug until \S+Z \(then info\)\n$`)
	if r.code != 0 || !set.MatchString(r.stdout) || r.stderr != "" {
		t.Errorf("log-level debug --all --for 1m: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for id, lvl := range levels {
		if lvl.Level() != zap.DebugLevel {
			t.Errorf("node %s at %v after the set; want debug", id, lvl.Level())
		}
	}
	// A second --for, short: it goes back to the first one's level, info.
	r = rivetctl(t, addr, "log-level", "debug", "--all", "--for", "100ms")
	if r.code != 0 || !strings.Contains(r.stdout, "(then info)") {
		t.Errorf("log-level debug --all --for 100ms: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Both go back by themselves.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := rivetctl(t, addr, "log-level", "--all", "-o", "json")
		if r.code == 0 && r.stdout == `[{"node_id":"n1","level":"info"},{"node_id":"n2","level":"info"}]`+"\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes never went back to info: exit %d, %q, %q", r.code, r.stdout, r.stderr)
		}
	}
	for id, lvl := range levels {
		if lvl.Level() != zap.InfoLevel {
			t.Errorf("node %s at %v after the revert; want info", id, lvl.Level())
		}
	}

	rivetctl(t, addr, "log-level", "warn", "--node", "n2", "-o", "json").
		want(t, 0, `{"node_id":"n2","level":"warn","previous_level":"info"}`+"\n")
	if levels["n1"].Level() != zap.InfoLevel || levels["n2"].Level() != zap.WarnLevel {
		t.Errorf("after n2's set: n1 %v, n2 %v; want info, warn", levels["n1"].Level(), levels["n2"].Level())
	}
	rivetctl(t, addr, "log-level", "--node", "n2").want(t, 0, "node n2: warn\n")

	rivetctl(t, addr, "log-level", "verbose").
		wantErr(t, 2, `rivetctl: unknown log level "verbose": want one of debug, info, warn, error`)
	rivetctl(t, addr, "log-level", "verbose", "--all").
		wantErr(t, 2, `rivetctl: unknown log level "verbose": want one of debug, info, warn, error`)
	rivetctl(t, addr, "log-level", "WARN", "--node", "n2").want(t, 0, "node n2: warn -> warn\n") // any case
	rivetctl(t, addr, "log-level", "debug", "--node", "n3").
		wantErrPrefix(t, 1, `rivetctl: not found: no node "n3" is registered`)
	rivetctl(t, addr, "log-level", "--for", "1m").wantErr(t, 2, "rivetctl: --for goes with a LEVEL to set for that long")
	rivetctl(t, addr, "log-level", "debug", "--for", "-1s").wantErr(t, 2, "rivetctl: --for must be positive, not -1s")
	rivetctl(t, addr, "log-level", "debug", "--node", "n2", "--all").wantErr(t, 2, "rivetctl: --node and --all go apart")
	rivetctl(t, addr, "log-level", "debug", "info").wantErrPrefix(t, 2, "rivetctl: ")
	if levels["n1"].Level() != zap.InfoLevel || levels["n2"].Level() != zap.WarnLevel {
		t.Errorf("refused requests changed levels: n1 %v, n2 %v", levels["n1"].Level(), levels["n2"].Level())
	}
	var ll struct {
		Level string `json:"level"`
	}
	r = rivetctl(t, addr, "log-level", "info", "--node", "n2", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &ll); err != nil || ll.Level != "info" {
		t.Errorf("log-level info --node n2: %q, %v", r.stdout, err)
	}
}
