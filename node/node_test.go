package node_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
)

// The tests that take longest mostly wait (for etcd to come back, a lease
// to run out, a frozen etcd to time out) and call t.Parallel, so that two
// wait at once; the tests that count the process's goroutines or file
// descriptors do not, and Go starts parallel tests only once every
// sequential one has ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	)
}

func startNode(tb testing.TB, ctx context.Context, cfg node.Config, reg *rivet.Registry) *node.Node {
	tb.Helper()
	return node.StartForTest(tb, ctx, cfg, reg)
}

func clusterConfig(tb testing.TB, id string, endpoints []string, prefix string, parts uint32, join []string) node.Config {
	return node.ClusterConfigForTest(tb, id, endpoints, prefix, parts, join)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A node serves, reports itself ready, counts calls in /metrics, stops
// cleanly, and a new node on the same data dir has the actors' state.
func TestNodeServesMetricsAndKeepsStateAcrossRestart(t *testing.T) {
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func() *node.Node {
		cfg := node.DefaultLocalConfig(dir)
		cfg.Logger = zap.NewNop()
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start()
	id := n.ID()
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if got, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "n"), "increment", 2); err != nil || got != 2*i {
			t.Fatalf("increment %d = %d, %v", i, got, err)
		}
	}
	c.Close()
	if code, body := get(t, "http://"+n.HTTPAddr()+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	_, metrics := get(t, "http://"+n.HTTPAddr()+"/metrics")
	for _, want := range []string{`rivet_calls_total{action="increment",actor="counter",code="ok",reason=""} 3`, "rivet_active_actors 1", "rivet_partitions_owned 64",
		"rivet_partitions_claimed_total 64", "rivet_cluster_members_alive 1", "rivet_forwards_total 0", "rivet_lease_losses_total 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	n = start()
	defer n.Stop(ctx)
	if n.ID() != id {
		t.Fatalf("node ID changed across restart: %s -> %s", id, n.ID())
	}
	c, err = client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := rivet.Call[int](ctx, c.Get("counter", "n"), "getCount"); err != nil || got != 6 {
		t.Fatalf("after restart count = %d, %v; want 6", got, err)
	}
}

// A node of a cluster that listens on all interfaces without an advertise
// address is refused at start: the address others would be told, 0.0.0.0,
// would send their forwarded calls to themselves.
func TestAClusteredNodeOnAllInterfacesNeedsAnAdvertiseAddress(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.GRPCAddr = "0.0.0.0:0"
	cfg.EtcdEndpoints = []string{"127.0.0.1:1"} // never dialed: refused before
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := node.Start(ctx, cfg, reg); err == nil || !strings.Contains(err.Error(), "--advertise-addr") {
		if n != nil {
			n.Stop(ctx)
		}
		t.Fatalf("start = %v, want a refusal naming --advertise-addr", err)
	}
}

// Draining the only node that could hold the partitions is refused at
// once, saying why, rather than marking it draining for good with nothing
// able to move.
func TestDrainingTheOnlyEligibleNodeIsRefused(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := startNode(t, ctx, node.DefaultLocalConfig(t.TempDir()), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The request is well formed: the cluster's state refuses it, and
	// another node started (or undrained) would let it through.
	_, err = c.Drain(ctx, n.ID(), false)
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrFailedPrecondition) || client.Code(err) != codes.FailedPrecondition || !errors.As(err, &re) ||
		re.Group+"."+re.Code != "node.last_eligible" || !strings.Contains(err.Error(), "no other node") {
		t.Fatalf("drain of the only node = %v (%v), want FAILED_PRECONDITION node.last_eligible saying no other node can take its partitions", err, client.Code(err))
	}
	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 1 || strings.Contains(ms[0].State, "draining") {
		t.Fatalf("members after the refused drain = %+v, %v; want the node, not draining", ms, err)
	}
}

// With etcd TLS configured, an endpoint that would be dialed in plaintext
// is refused, whatever the case of its scheme (etcd's client lowercases
// it, then drops the TLS configuration for http).
func TestEtcdTLSRefusesPlaintextEndpoints(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ep := range []string{"http://127.0.0.1:1", "HTTP://127.0.0.1:1", "Http://127.0.0.1:1"} {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.EtcdEndpoints = []string{ep}
		cfg.EtcdCAFile = "ca.pem" // never read: refused before
		if n, err := node.Start(ctx, cfg, reg); err == nil || !strings.Contains(err.Error(), "https://") {
			if n != nil {
				n.Stop(ctx)
			}
			t.Fatalf("start with etcd TLS and endpoint %s = %v, want a refusal saying endpoints must be https://", ep, err)
		}
	}
}

// A node asked to stop while it starts (SIGTERM or Ctrl-C during its
// start: the context of Run is done) stops cleanly and Run returns nil,
// at whatever point of the start the request comes.
func TestRunStoppedWhileStartingIsNoFailure(t *testing.T) {
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.Logger = zap.NewNop()
		cfg.HTTPAddr = "-"
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(after, cancel)
		done := make(chan error, 1)
		go func() { done <- node.Run(ctx, cfg, reg) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run stopped %v into its start = %v, want nil", after, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Run stopped %v into its start did not return within a minute", after)
		}
		stop.Stop()
		cancel()
	}
	// A start that fails for a reason of its own (its port is taken) is a
	// failure even if a stop was asked for meanwhile.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.HTTPAddr = "-"
	cfg.GRPCAddr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := node.Run(ctx, cfg, reg); err == nil {
		t.Errorf("Run on a port in use, stopped as it started = nil, want the start's failure")
	}
}

// A drain request that names no node is refused: it used to drain
// whichever node answered it (any one, behind several endpoints or a load
// balancer), and its reply's node_id was empty, so the operator could not
// even tell which.
func TestADrainOfNoNamedNodeIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodes(t, ctx)
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Drain(ctx, "", false); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "node_id is empty") {
		t.Fatalf("drain of node \"\" = %v, want INVALID_ARGUMENT saying node_id is empty", err)
	}
	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 2 {
		t.Fatalf("members = %+v, %v", ms, err)
	}
	for _, m := range ms {
		if m.Draining {
			t.Errorf("node %s is draining after a refused drain of no node", m.NodeID)
		}
	}
	if na.Ownership().Owned() == 0 || nb.Ownership().Owned() == 0 {
		t.Errorf("partitions owned after a refused drain: a %d, b %d", na.Ownership().Owned(), nb.Ownership().Owned())
	}
}

// An OTLP endpoint the exporter would not take as given (it sends to
// localhost:4317 instead, or in plaintext) fails the start, saying what
// it wants.
func TestABadOTLPEndpointFailsTheStart(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ep := range []string{"collector", "collector:", ":4317", "collector:otlp", "grpc://collector:4317", "dns:///collector:4317", "http://", "https://:4317", "collector:4317/v1"} {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.OTLPEndpoint = ep
		if n, err := node.Start(ctx, cfg, reg); err == nil || !strings.Contains(err.Error(), "OTLP endpoint") {
			if n != nil {
				n.Stop(ctx)
			}
			t.Errorf("start with OTLP endpoint %q = %v, want a refusal naming it", ep, err)
		}
	}
}
