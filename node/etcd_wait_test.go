package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node whose external etcd does not answer yet (its members start with
// the nodes, in any order) waits for it and says so, naming the
// endpoints, until etcd answers, and then starts. It said nothing: its
// first call to etcd waited for a connection without an end, and the node
// hung silent at start.
func TestANodeWaitingForEtcdSaysSoAndStartsOnceItAnswers(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, strings.TrimPrefix(endpoints[0], "http://"))
	proxy.setCut(true, false) // etcd hears nothing, and answers nothing
	core, logs := observer.New(zap.WarnLevel)
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = "-"
	cfg.EtcdEndpoints = []string{"http://" + proxy.addr()}
	cfg.Logger = zap.New(core)
	type started struct {
		n   *node.Node
		err error
	}
	start := make(chan started, 1)
	go func() {
		n, err := node.Start(ctx, cfg, reg)
		start <- started{n, err}
	}()
	const said = "etcd does not answer yet; still trying (is it up, and are --etcd-endpoints right?)"
	for logs.FilterMessage(said).Len() == 0 {
		select {
		case s := <-start:
			t.Fatalf("the node started (%v) while etcd answered nothing", s.err)
		case <-ctx.Done():
			t.Fatalf("the node said nothing of the etcd it waits for; its warnings: %v", logs.All())
		case <-time.After(50 * time.Millisecond):
		}
	}
	w := logs.FilterMessage(said).All()[0].ContextMap()
	if eps, _ := w["endpoints"].([]interface{}); len(eps) != 1 || eps[0] != cfg.EtcdEndpoints[0] {
		t.Errorf("the warning names endpoints %v, want %v", w["endpoints"], cfg.EtcdEndpoints)
	}

	proxy.setCut(false, false)
	select {
	case s := <-start:
		if s.err != nil {
			t.Fatalf("start once etcd answers: %v", s.err)
		}
		if err := s.n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the node did not start once etcd answered")
	}
}
