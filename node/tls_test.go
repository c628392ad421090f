package node_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A two-node cluster with mTLS and a token: callers without TLS, without a
// client certificate, without the token or with a wrong one are refused;
// one with all three gets through, to both nodes, and a call to the node
// that does not own the actor is forwarded to its owner over the peers'
// TLS streams, which carry the token too (a peer stream without it is
// refused). Health stays open to any caller that completes the handshake,
// and /readyz to anyone.
func TestClusterWithMutualTLSAndToken(t *testing.T) {
	t.Setenv(client.TokenEnv, "") // the environment must not lend a token
	const token, parts = "s3cret-t0ken", 16
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := certs.Generate(dir, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(id string, join []string) *node.Node {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.NodeID = id
		cfg.EtcdEndpoints = endpoints
		cfg.EtcdPrefix = "/tls-test/"
		cfg.Partitions = parts
		cfg.Join = join
		cfg.Logger = zap.NewNop()
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = file(certs.NodeFile), file(certs.NodeKeyFile), file(certs.CAFile)
		cfg.Token = token
		return startNode(t, ctx, cfg, reg)
	}
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	// Settled: every partition on the node the ring gives it, and no
	// handoff left to run, so that none moves the test's actors.
	waitPlaced(t, time.Minute, parts, a, b)
	keyOn := func(n *node.Node) string {
		for i := range 100_000 {
			k := "k" + strconv.Itoa(i)
			if n.Host().Owns(placement.Partition("counter", storage.EncodeKey([]string{k}), parts)) {
				return k
			}
		}
		t.Fatalf("node %s owns none of the first 100,000 counter keys", n.ID())
		return ""
	}
	onA, onB := keyOn(a), keyOn(b)

	newClient := func(addr string, opts ...client.Option) *client.Client {
		t.Helper()
		c, err := client.New(addr, append([]client.Option{client.WithRetry(time.Millisecond, 0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	mtls := client.WithTLS(file(certs.CAFile), file(certs.ClientFile), file(certs.ClientKeyFile))
	increment := func(c *client.Client, key string) (int, error) {
		return rivet.Call[int](ctx, c.GetOrCreate("counter", key), "increment", 1)
	}

	for _, tc := range []struct {
		name string
		opts []client.Option
		kind error
	}{
		{"plaintext", []client.Option{client.WithToken(token)}, rivet.ErrUnavailable},
		{"TLS without a client certificate", []client.Option{client.WithTLS(file(certs.CAFile), "", ""), client.WithToken(token)}, rivet.ErrUnavailable},
		{"mTLS without a token", []client.Option{mtls}, rivet.ErrUnauthenticated},
		{"mTLS with a wrong token", []client.Option{mtls, client.WithToken(token + "x")}, rivet.ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := increment(newClient(a.GRPCAddr(), tc.opts...), onA)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("increment: %v, want %v", err, tc.kind)
			}
			t.Logf("refused: %v", err)
		})
	}

	ca := newClient(a.GRPCAddr(), mtls, client.WithToken(token))
	if n, err := increment(ca, onA); err != nil || n != 1 {
		t.Fatalf("increment on a, served by a: %d, %v", n, err)
	}
	forwardsBefore := forwards(t, a)
	for want := 1; want <= 3; want++ {
		if n, err := increment(ca, onB); err != nil || n != want {
			t.Fatalf("increment on a, forwarded to b: %d, %v; want %d", n, err, want)
		}
	}
	if got := forwards(t, a) - forwardsBefore; got != 3 {
		t.Errorf("a forwarded %d requests, want 3", got)
	}
	cb := newClient(b.GRPCAddr(), mtls, client.WithToken(token))
	if n, err := rivet.Call[int](ctx, cb.Get("counter", onB), "getCount"); err != nil || n != 3 {
		t.Fatalf("count on b, its owner: %d, %v; want 3", n, err)
	}

	// Health needs the handshake but no token; /readyz (plain HTTP) needs
	// nothing.
	if ok, err := newClient(a.GRPCAddr(), mtls).Healthy(ctx); err != nil || !ok {
		t.Errorf("health with mTLS and no token: %v, %v", ok, err)
	}
	if code, body := get(t, "http://"+a.HTTPAddr()+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s", code, body)
	}

	// A peer stream is a node's own door: without the token, a client
	// with a valid certificate still cannot forward through it.
	tlsCfg, err := certs.ClientConfig(file(certs.CAFile), file(certs.ClientFile), file(certs.ClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := rivetv1.NewPeerServiceClient(conn).ForwardBatches(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("peer stream without the token: %v, want UNAUTHENTICATED", err)
	}

	// Without a client certificate nothing gets through, not even with
	// the token: not a peer stream, not a subscription, not health.
	noCert, err := certs.ClientConfig(file(certs.CAFile), "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn2, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(noCert)),
		grpc.WithPerRPCCredentials(auth.NewCredentials(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	peer, err := rivetv1.NewPeerServiceClient(conn2).ForwardBatches(ctx)
	if err == nil {
		_, err = peer.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("peer stream without a client certificate: %v, want UNAVAILABLE", err)
	}
	sub, err := rivetv1.NewActorServiceClient(conn2).Subscribe(ctx, &rivetv1.SubscribeRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{onB}}})
	if err == nil {
		_, err = sub.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("subscribe without a client certificate: %v, want UNAVAILABLE", err)
	}
	if _, err := healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("health without a client certificate: %v, want UNAVAILABLE", err)
	}
}

var forwardsLine = regexp.MustCompile(`(?m)^rivet_forwards_total (\d+)$`)

// forwards reads the node's count of requests forwarded to other nodes.
func forwards(t *testing.T, n *node.Node) int {
	t.Helper()
	_, body := get(t, "http://"+n.HTTPAddr()+"/metrics")
	m := forwardsLine.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no rivet_forwards_total in /metrics")
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// A node reaches an external etcd that requires TLS client certificates
// with --etcd-ca, --etcd-cert and --etcd-key.
func TestExternalEtcdOverTLS(t *testing.T) {
	dir := t.TempDir()
	if err := certs.Generate(dir, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	ec := embed.NewConfig()
	ec.Dir = t.TempDir()
	cu, _ := url.Parse("https://127.0.0.1:0")
	pu, _ := url.Parse("http://127.0.0.1:0")
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ClientTLSInfo = transport.TLSInfo{
		CertFile: file(certs.NodeFile), KeyFile: file(certs.NodeKeyFile),
		TrustedCAFile: file(certs.CAFile), ClientCertAuth: true,
	}
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready within 30s")
	}
	endpoint := "https://" + e.Clients[0].Addr().String()

	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.EtcdEndpoints = []string{endpoint}
	cfg.EtcdCAFile, cfg.EtcdCertFile, cfg.EtcdKeyFile = file(certs.CAFile), file(certs.ClientFile), file(certs.ClientKeyFile)
	cfg.GossipAddr, cfg.HTTPAddr = "-", "-"
	cfg.Logger = zap.NewNop()
	n := startNode(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "tls"), "increment", 2); err != nil || got != 2 {
		t.Fatalf("increment: %d, %v", got, err)
	}
}

// A token of white space only (a secret file holding just a newline, say)
// is a token asked for that would check nothing once trimmed: the node
// refuses to start rather than serve every caller without one.
func TestBlankTokenIsRefused(t *testing.T) {
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tok := range []string{" ", "\n", " \t\r\n "} {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.Logger = zap.NewNop()
		cfg.HTTPAddr = "-"
		cfg.Token = tok
		n, err := node.Start(ctx, cfg, reg)
		if n != nil {
			n.Stop(ctx)
		}
		if err == nil || !strings.Contains(err.Error(), "Token") {
			t.Fatalf("start with token %q = %v, want a refusal naming Token", tok, err)
		}
	}
}

// wireCodec sends a request given as bytes as it is, and takes any reply.
type wireCodec struct{}

func (wireCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (wireCodec) Unmarshal([]byte, any) error   { return nil }
func (wireCodec) Name() string                  { return "proto" }

// The token is checked before anything else looks at a request: one that
// does not even decode is refused UNAUTHENTICATED without the token (not
// answered as if the node had read it), and INVALID_ARGUMENT with it.
func TestTokenIsCheckedBeforeTheRequestIsDecoded(t *testing.T) {
	t.Setenv(client.TokenEnv, "")
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.Token = "s3cret"
	n := startNode(t, ctx, cfg, reg)
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wireCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	undecodable := []byte{0x0a, 0x02, 0xff, 0xfe} // field 1: neither UTF-8 nor a message
	for _, m := range []string{rivetv1.AdminService_Drain_FullMethodName, rivetv1.ActorService_Destroy_FullMethodName, rivetv1.ActorService_Call_FullMethodName} {
		if err := conn.Invoke(ctx, m, undecodable, new(struct{})); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, undecodable, without the token: %v, want UNAUTHENTICATED", m, err)
		}
		authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
		if err := conn.Invoke(authed, m, undecodable, new(struct{})); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s, undecodable, with the token: %v, want INVALID_ARGUMENT", m, err)
		}
	}
}
