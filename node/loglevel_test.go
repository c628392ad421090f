package node_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// lockedBuffer is a zapcore.WriteSyncer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}
func (b *lockedBuffer) Sync() error { return nil }
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A node given a logger at error level (--log-level error) starts and
// stops without a word from zap itself: quietening etcd's logs to
// warnings and up (zap.IncreaseLevel) is refused by a logger already
// above warnings, and zap wrote "failed to IncreaseLevel: invalid
// increase level ..." to stderr at every start, on its own line, plain
// text even under --log-format json.
func TestALoggerAtErrorLevelGetsNoComplaintFromTheNode(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	for _, external := range []bool{false, true} {
		var logs, zapErrs lockedBuffer
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.HTTPAddr = "-"
		if external {
			cfg.EtcdEndpoints = endpoints
		}
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		cfg.Logger = zap.New(zapcore.NewCore(enc, &logs, zapcore.ErrorLevel), zap.ErrorOutput(&zapErrs))
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if s := zapErrs.String(); s != "" {
			t.Errorf("external etcd %v: zap's own errors:\n%s", external, s)
		}
	}
}
