package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/internal/optjson"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/tracing"
)

// DefaultEndpoint is where a node listens unless configured otherwise.
const DefaultEndpoint = "localhost:6420"

// EndpointEnv names the environment variable New reads when given no
// address, as the original engine's clients do.
const EndpointEnv = "RIVET_ENDPOINT"

// TokenEnv names the environment variable New reads the bearer token from
// when given no WithToken, as the original engine's clients do.
const TokenEnv = auth.TokenEnv

// maxMsgBytes bounds the messages the client sends and receives. It is well
// above the node's own limits (4 MiB by default), so that an oversized
// payload reaches the node and comes back as RESOURCE_EXHAUSTED naming the
// limit, rather than failing in the client with gRPC's generic message.
const maxMsgBytes = 64 << 20

// reconnectBackoff paces a connection's attempts to reconnect to a node
// that is down: gRPC's growth and jitter from a quarter of a second, never
// more than a second apart.
var reconnectBackoff = backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// clientKeepalive is how the client finds a node gone without a word (a
// cut network, a frozen host) while it has calls or subscriptions on it: a
// ping after 10 s without a frame from the node, which must be answered
// within 5 s, or the connection fails and the calls on it fail
// (UNAVAILABLE) and are retried as their kind allows. A silent node is
// then found within 15 s of its last frame, where 30 s and 10 s took 40 s,
// longer than many callers' deadlines. 10 s is the shortest interval gRPC
// allows a client, and these are a node's own to its peers
// (server.PeerKeepalive). The timeout is also the socket's
// TCP_USER_TIMEOUT (how long data sent may stay unacknowledged).
//
// A node takes a ping within 5 s of the last for abuse (its enforcement
// policy, server.ServerOptions) and closes the connection after the third
// (GOAWAY too_many_pings); any data or headers it sent in between clear the
// count. The client pings only after 10 s without reading anything, so
// never within 5 s of its last ping, nor while the node is answering.
//
// No pings while the client has nothing in flight: an idle client costs its
// nodes nothing, and its first call after a quiet spell pings at once.
var clientKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}

// Client is a connection to a rivet cluster. It is safe for concurrent use;
// make one per process and Close it when done.
type Client struct {
	conn   *grpc.ClientConn
	actors rivetv1.ActorServiceClient
	admin  rivetv1.AdminServiceClient
	retry  retryPolicy
	router *router // nil unless WithDirectRouting
	// closed ends with Close: it ends the subscriptions still open, whose
	// goroutines would otherwise wait for ever to hand an event to a
	// reader that left with the client.
	closed context.Context
	close  context.CancelFunc
}

var (
	_ caller.Client  = (*Client)(nil)
	_ caller.Creator = (*Client)(nil)
)

// Option configures a Client.
type Option func(*options)

type options struct {
	dial   []grpc.DialOption
	retry  retryPolicy
	direct time.Duration
	// tls is set by WithTLSConfig, tlsFiles by WithTLS (loaded by New,
	// which can report a bad file).
	tls      *tls.Config
	tlsFiles *[3]string
	token    *string // nil: $RIVET_TOKEN
}

// WithTLS makes the client dial with TLS: it verifies nodes' certificates
// against the CAs in caFile (PEM; empty: the system's roots) and, given
// certFile and keyFile, presents that client certificate to nodes that
// require one (mTLS). The name verified is the host of the address
// dialed, so a node's certificate must name it. New fails if a file
// cannot be read.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.tls, o.tlsFiles = nil, &[3]string{caFile, certFile, keyFile} }
}

// WithTLSConfig makes the client dial with TLS configured by cfg (for
// certificates that are not in files).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) { o.tls, o.tlsFiles = cfg, nil }
}

// WithToken sends token as "authorization: Bearer <token>" with every
// call, for nodes that require one; "" sends none. Without this option
// the client sends $RIVET_TOKEN if it is set. The token is sent over
// plaintext connections too (a node on loopback, a trusted network), but
// anyone on the path can read it there: use TLS across networks.
func WithToken(token string) Option {
	return func(o *options) { o.token = &token }
}

// WithDirectRouting makes the client send each actor call (and open each
// subscription) straight to the node that owns the actor, from a copy of
// the cluster's partition table
// refreshed every interval (0: 2 s), instead of letting the node at addr
// forward it. Calls the table cannot place, and calls to a node this
// client cannot dial (say, a container address), go to addr as before.
// Use it when the client can reach every node's advertised address.
//
// While calls or subscriptions are in flight straight to owners, the node
// at addr is asked for the cluster's members every interval even if no new
// call comes, and those on an owner the cluster no longer lists as live
// (its lease lost, or gone from the member list) are cut off at once,
// rather than left to the connection's keepalive (about 15 s) as an owner
// that freezes (a stopped process, a cut network) would leave them. A call
// cut off fails UNAVAILABLE, naming the node, of an unknown outcome (it may
// have run): calls without side effects (reads, GetOrCreate, cancels, a
// Send with an idempotency key) are retried, through the seed or the new
// owner; Call, Send, Create, Destroy and RetryWorkflow are not, as a
// forwarded call whose owner was lost mid-call is not. A subscription cut
// off subscribes again where the table now says the actor is (a Gap). So
// an owner that freezes costs its lease (2-3 s with default settings) and
// up to an interval: about as long as through a forwarding node (2-4 s),
// where it took 15 s. An owner still registered keeps its calls whatever
// gossip says: one that stops gracefully finishes what it serves. The node
// at addr is asked first; while it fails to answer within 2 s (it froze,
// or restarts), the other nodes the client has connections to are asked,
// and the one that answers takes what would have gone to addr (calls the
// table cannot place, reads retried after a cut-off), so that a frozen
// addr does not hold them for the keepalive either. Calls sent to addr
// before the client finds it silent (up to an interval and 2 s), and the
// admin calls (Members, Partitions, Stats, Drain, Healthy), still wait
// for the keepalive.
func WithDirectRouting(interval time.Duration) Option {
	return func(o *options) {
		if interval <= 0 {
			interval = 2 * time.Second
		}
		o.direct = interval
	}
}

// WithDialOptions adds gRPC dial options, after the client's defaults
// (credentials from WithTLS and WithToken, large message bounds), so they
// can override them. An interceptor among them must pass each call's
// options on to the invoker: the client learns from one of them (gRPC's
// Peer) whether an attempt reached a node, and without it would take an
// attempt that did for one that did not, and retry a call that may have
// run.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithTracing makes the client trace its calls with OpenTelemetry: a
// client span for each gRPC call (each attempt of a retried call), whose
// W3C trace context goes to the node with the call, so that the node's
// spans (docs/deploy.md, "Tracing"), those of the node it forwards the
// call to included, join the caller's trace. tp nil: otel's global
// provider. The context is sent whatever otel's global propagator is (its
// default sends nothing).
func WithTracing(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		o.dial = append(o.dial, grpc.WithStatsHandler(tracing.ClientHandler(tp)))
	}
}

// WithRetry sets how long the client keeps retrying a call that failed
// with UNAVAILABLE: first after initial, then doubling (waits are capped
// at a second), until budget has passed since the first failure or the
// call's context ends; a wait that would end past the context's deadline,
// or too near it for an attempt to be answered (within 250 ms, or a
// quarter of the call's time if less), is not taken, so the call fails by
// its deadline with the last attempt's error. A zero budget turns retries
// off.
// Default: 50 ms, 15 s, which rides out a node's failover with default
// settings (its actors serve again elsewhere within 3.3-5 s).
func WithRetry(initial, budget time.Duration) Option {
	return func(o *options) { o.retry = retryPolicy{initial: initial, budget: budget} }
}

// New returns a client of the node at addr (host:port). An empty addr means
// $RIVET_ENDPOINT, or DefaultEndpoint if that is unset. New does not
// connect: the first call does, so a node that starts later is fine.
//
// addr may list several nodes of one cluster, comma-separated
// ("n1:6420,n2:6420"), as etcd's clients take their endpoints: the client
// spreads its calls over those it can reach and leaves out one that goes
// (a call in flight on it then fails as it would with one address; the
// client's retries and a subscription's resubscribing go to the others).
// What this package says of "the node the client is connected to" (Stats,
// Healthy, and HotActors, RetryingWorkflows, LogLevel and SetLogLevel of
// node "") is then whichever of them that call reached: successive Stats
// answer for different nodes, SetLogLevel sets one node's level, and
// Healthy says true while another node of the list is down. Name a node
// by its ID (Members lists them) to reach that one, and check each node's
// health with a client of its address alone, as `rivetctl health` does
// given several.
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = os.Getenv(EndpointEnv)
	}
	if addr == "" {
		addr = DefaultEndpoint
	}
	o := options{retry: defaultRetry()}
	for _, opt := range opts {
		opt(&o)
	}
	creds, err := o.credentials()
	if err != nil {
		return nil, fmt.Errorf("rivet client: %w", err)
	}
	// The router dials the other nodes with the same options, so the
	// credentials reach every node the client talks to.
	// Keepalive pings find a node gone without a word (a cut network):
	// the calls on its connection then fail, and are retried elsewhere,
	// instead of waiting for their deadline, or for ever without one
	// (clientKeepalive).
	// The reconnect backoff is capped at a second: gRPC's default grows to
	// two minutes between attempts, so that a client whose node was down
	// a few minutes (a restart, an upgrade) failed every call for up to two
	// minutes more. Calls fail at once while no connection is up, and the
	// retry budget is seconds.
	// gRPC's own retries are off (its transparent ones, of attempts that
	// sent nothing, stay): a retry policy in a service config (one a DNS
	// TXT record may carry) would send a side-effecting call again after an
	// UNAVAILABLE that may follow its run; the client's retries tell the
	// two apart.
	dial := append(append(creds,
		grpc.WithDisableRetry(),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxMsgBytes), grpc.MaxCallRecvMsgSize(maxMsgBytes)),
		grpc.WithKeepaliveParams(clientKeepalive),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 20 * time.Second}),
	), o.dial...)
	target := addr
	if strings.Contains(addr, ",") {
		var err error
		if target, dial, err = severalNodes(addr, dial); err != nil {
			return nil, fmt.Errorf("rivet client: %w", err)
		}
		o.retry.nodes = len(SplitEndpoints(addr))
	} else if err := checkAddr(addr); err != nil {
		return nil, fmt.Errorf("rivet client: %w", err)
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("rivet client: %s: %w", addr, err)
	}
	c := &Client{
		conn:   conn,
		actors: rivetv1.NewActorServiceClient(conn),
		admin:  rivetv1.NewAdminServiceClient(conn),
		retry:  o.retry,
	}
	c.closed, c.close = context.WithCancel(context.Background())
	c.retry.closed = c.closed
	if o.direct > 0 {
		c.router = newRouter(conn, dial, o.direct)
		c.actors = rivetv1.NewActorServiceClient(c.router)
	}
	return c, nil
}

// SplitEndpoints returns the node addresses of a comma-separated list, as
// New reads one (blanks around them, and empty ones, left out), for a
// program that deals with the nodes of a list one by one.
func SplitEndpoints(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// severalNodes returns the target and dial options of a connection to any
// of the comma-separated node addresses in list: a resolver of this client's
// own that lists them all, and gRPC's round_robin, which spreads the calls
// over those that answer and leaves out one that goes, as etcd's client
// does with its endpoints. (With pick_first, every client of a list sent
// all its calls to its first node, which forwarded two in three of them,
// and a kill of that node failed the calls in flight of every client: a
// trial.) Each address keeps its host name for TLS, as if it were dialed
// alone.
func severalNodes(list string, dial []grpc.DialOption) (string, []grpc.DialOption, error) {
	var addrs []resolver.Address
	for _, a := range SplitEndpoints(list) {
		if err := checkAddr(a); err != nil {
			return "", nil, err
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, fmt.Errorf("node address %q: %w", a, err)
		}
		addrs = append(addrs, resolver.Address{Addr: a, ServerName: host})
	}
	if len(addrs) == 0 {
		return "", nil, fmt.Errorf("no node address in %q", list)
	}
	r := manual.NewBuilderWithScheme("rivet-nodes")
	r.InitialState(resolver.State{Addresses: addrs})
	// First, so that a service config of the caller's dial options wins.
	opts := append([]grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`)}, dial...)
	return r.Scheme() + ":///" + addrs[0].Addr, append(opts, grpc.WithResolvers(r)), nil
}

// checkAddr refuses a node address that gRPC would misread rather than
// fail on: one without a port, which it dials at 443 (HTTPS's port, not a
// node's), and an http(s) URL, whose scheme it takes for a resolver's; and
// one whose port no dial could use, which gRPC only finds when it dials (an
// UNAVAILABLE, retried, that reads as a node down). A gRPC target
// (dns:///host:port, unix:path) passes.
func checkAddr(a string) error {
	if rest, ok := strings.CutPrefix(a, "http://"); ok || strings.HasPrefix(a, "https://") {
		if !ok {
			rest = strings.TrimPrefix(a, "https://")
		}
		return fmt.Errorf("node address %q is a URL: give host:port (%s)", a, strings.TrimSuffix(rest, "/"))
	}
	var ae *net.AddrError
	_, port, err := net.SplitHostPort(a)
	if errors.As(err, &ae) && strings.Contains(ae.Err, "missing port") {
		return fmt.Errorf("node address %q has no port (host:port, such as %s)", a, net.JoinHostPort(strings.Trim(a, "[]"), defaultPort()))
	}
	if err != nil || strings.Contains(a, ":/") {
		return nil // a gRPC target, or what SplitHostPort's caller reports
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 1 || n > 65535 {
			return fmt.Errorf("node address %q: port %d is not a port (1-65535)", a, n)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("node address %q: port %q is not a port (a number, 1-65535)", a, port)
	}
	return nil
}

// credentials returns the dial options of the client's TLS and token.
// Plaintext is the default because a node listens on loopback unless
// configured otherwise.
func (o *options) credentials() ([]grpc.DialOption, error) {
	cfg := o.tls
	if f := o.tlsFiles; f != nil {
		var err error
		if cfg, err = certs.ClientConfig(f[0], f[1], f[2]); err != nil {
			return nil, err
		}
	}
	out := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg != nil {
		out[0] = grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	token := os.Getenv(TokenEnv)
	if o.token != nil {
		token = *o.token
	}
	if token = strings.TrimSpace(token); token != "" {
		for _, r := range token {
			if r < 0x20 || r > 0x7e {
				return nil, errors.New("the token must be printable ASCII (it travels in gRPC metadata)")
			}
		}
		out = append(out, grpc.WithPerRPCCredentials(auth.NewCredentials(token)))
	}
	return out, nil
}

// Close closes the connections. Calls in flight fail with Canceled ("the
// rivet client was closed (Client.Close) during the call", which may have
// run), and so, at once, does a call waiting to be retried (not run, if
// no attempt of it may have); subscriptions still open end
// (ErrSubscriptionClosed). Calls made after Close fail with Canceled too
// ("the rivet client is closed"), not sent. Each matches context.Canceled
// although no context of the caller's ended: a server that reads that as its own
// client gone (HTTP's 499, not logged) should close the rivet client only
// once its handlers have returned (after http.Server.Shutdown).
func (c *Client) Close() error {
	c.close()
	if c.router != nil {
		c.router.close()
	}
	return c.conn.Close()
}

// GetOrCreate returns a handle whose calls create the actor if it does not
// exist. Its dynamic type is *ActorHandle; c.Actor gives it typed.
func (c *Client) GetOrCreate(name string, key ...string) caller.Handle {
	return c.Actor(name, key...)
}

// Get returns a handle whose calls fail with rivet.ErrNotFound if the actor
// does not exist. Its dynamic type is *ActorHandle; c.Actor(...).NoCreate()
// gives it typed.
func (c *Client) Get(name string, key ...string) caller.Handle {
	return c.Actor(name, key...).NoCreate()
}

// Actor returns a handle on the actor (name, key) whose calls create it if
// it does not exist (getOrCreate), Query and Info included (State and
// Inspect create nothing). Handles are cheap: nothing is sent
// until a call. A key part may be the empty string (rivetctl refuses an
// empty KEY, as a likely slip): a service that builds keys from a request's
// fields checks them first, or a missing field addresses one actor shared
// by every such request.
func (c *Client) Actor(name string, key ...string) *ActorHandle {
	// A copy, so that a caller reusing its slice cannot change the handle.
	return &ActorHandle{c: c, name: name, key: append([]string(nil), key...), create: true}
}

// Create creates the actor (name, key) with input (marshalled to JSON; a
// json.RawMessage is sent as it is; nil for none). It fails with
// rivet.ErrAlreadyExists if the actor exists. A Create whose outcome is
// unknown (its connection broke) cannot be told from one that found the
// actor created by someone else: CreateWith with an idempotency key can.
func (c *Client) Create(ctx context.Context, name string, key []string, input any) (ActorInfo, error) {
	res, err := c.CreateWith(ctx, name, key, input, CreateOptions{})
	return res.ActorInfo, err
}

// CreateOptions are the options of CreateWith (caller.CreateOptions
// says what a key does).
type CreateOptions = caller.CreateOptions

// CreateResult is what CreateWith says of the actor.
type CreateResult = caller.CreateResult

// CreateWith creates the actor (name, key) with input, as Create does,
// with options (an idempotency key). It implements caller.Creator, so
// rivet.CreateWith reaches it through the Client interface too.
//
// The client retries a keyed create after a broken connection, as it does
// a read. A node older than the key ignores it: a retry of a create that
// applied then answers ALREADY_EXISTS. So whenever an earlier attempt of
// this call may have run, the client returns an ALREADY_EXISTS (still
// rivet.ErrAlreadyExists) with rivet.OutcomeUnknown true and a message
// that says an earlier attempt may have created the actor: from a current
// node too, which the client cannot tell apart (there it means another
// create made the actor: erring toward "may have").
func (c *Client) CreateWith(ctx context.Context, name string, key []string, input any, opts CreateOptions) (CreateResult, error) {
	in, err := optjson.Marshal("create input", input)
	if err != nil {
		return CreateResult{}, err
	}
	req := &rivetv1.CreateRequest{Actor: &rivetv1.ActorRef{Name: name, Key: key}, Input: in, IdempotencyKey: opts.IdempotencyKey}
	class := sideEffects
	if opts.IdempotencyKey != "" {
		class = idempotent
	}
	resp, ranBefore, err := invokeRetried(ctx, c.retry, class, c.actors.Create, req)
	if err != nil {
		return CreateResult{}, rpcerr.CreateRanBefore(ranBefore, err)
	}
	return CreateResult{ActorInfo: infoFrom(resp.GetActor()), Duplicate: resp.GetDuplicate()}, nil
}

// ListOptions page through actors. The zero value asks for the first page
// of the node's default size.
type ListOptions struct {
	// Limit is the page size: 0 means 100; the node serves at most 1000.
	Limit int
	// PageToken continues from a previous ListResult.NextPageToken.
	PageToken string
	// FailedWorkflows lists only the actors whose workflow failed, each
	// with its error (ActorInfo.WorkflowError); a retry or a destroy takes
	// an actor off the list.
	FailedWorkflows bool
}

// ListResult is one page of actors.
type ListResult struct {
	Actors []ActorInfo
	// NextPageToken is "" on the last page.
	NextPageToken string
}

// List returns one page of the actors named name ("" for all names).
func (c *Client) List(ctx context.Context, name string, opts ListOptions) (ListResult, error) {
	limit := uint32(0)
	if opts.Limit > 0 {
		limit = uint32(min(opts.Limit, 1<<31))
	}
	req := &rivetv1.ListRequest{Name: name, Limit: limit, PageToken: opts.PageToken, FailedWorkflows: opts.FailedWorkflows}
	resp, err := invoke(ctx, c, idempotent, c.actors.List, req)
	if err != nil {
		return ListResult{}, err
	}
	out := ListResult{Actors: make([]ActorInfo, len(resp.GetActors())), NextPageToken: resp.GetNextPageToken()}
	for i, a := range resp.GetActors() {
		out.Actors[i] = infoFrom(a)
	}
	return out, nil
}

// ListAll returns every actor named name ("" for all names), following
// pages until the last or the first error.
func (c *Client) ListAll(ctx context.Context, name string) ([]ActorInfo, error) {
	return c.listAll(ctx, name, ListOptions{Limit: 1000})
}

// ListFailed returns every actor named name ("" for all names) whose
// workflow failed, each with its error, following pages until the last or
// the first error. `rivetctl workflow retry` takes one off the list.
func (c *Client) ListFailed(ctx context.Context, name string) ([]ActorInfo, error) {
	return c.listAll(ctx, name, ListOptions{Limit: 1000, FailedWorkflows: true})
}

func (c *Client) listAll(ctx context.Context, name string, opts ListOptions) ([]ActorInfo, error) {
	var all []ActorInfo
	for {
		page, err := c.List(ctx, name, opts)
		if err != nil {
			return all, err
		}
		all = append(all, page.Actors...)
		if page.NextPageToken == "" {
			return all, nil
		}
		if page.NextPageToken == opts.PageToken {
			// A node's bug: followed, the same page would come back
			// until ctx ends (for ever without a deadline). (A page with
			// no actor and a token may be right: a filter that matched
			// none in the range the node read.)
			return all, rivet.Errorf(rivet.ErrInternal, "the node answered an actor list page that does not advance (the next page token %.40q again): a bug of the node's", opts.PageToken)
		}
		opts.PageToken = page.NextPageToken
	}
}

// Members lists the nodes of the cluster (without the recorded storage
// formats, which the node would read from etcd: MemberList).
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	ml, err := c.memberList(ctx, false)
	return ml.Members, err
}

// MemberList lists the nodes of the cluster, with the answering node's note
// when its list may be out of date, and the storage formats the cluster
// has recorded, which the node reads from etcd for it.
func (c *Client) MemberList(ctx context.Context) (MemberList, error) {
	return c.memberList(ctx, true)
}

func (c *Client) memberList(ctx context.Context, formats bool) (MemberList, error) {
	resp, err := invoke(ctx, c, idempotent, c.admin.Members, &rivetv1.MembersRequest{RecordedFormats: formats})
	if err != nil {
		return MemberList{}, err
	}
	out := make([]Member, len(resp.GetMembers()))
	for i, m := range resp.GetMembers() {
		out[i] = Member{
			NodeID:          m.GetNodeId(),
			GRPCAddr:        m.GetGrpcAddr(),
			State:           m.GetState(),
			PartitionsOwned: m.GetPartitionsOwned(),
			StartedAt:       timeFrom(m.GetStartedAt()),
			GossipAddr:      m.GetGossipAddr(),
			HTTPAddr:        m.GetHttpAddr(),
			Draining:        m.GetDraining(),
			Unreachable:     m.GetUnreachable(),
			Build:           m.GetBuild(),
			StorageFormat:   int(m.GetStorageFormat()),
		}
		if m.GetActorTypesKnown() {
			// Never nil when known: [] is "registers none", nil unknown.
			out[i].ActorTypes = append([]string{}, m.GetActorTypes()...)
		}
	}
	ml := MemberList{Members: out, Note: resp.GetNote()}
	if resp.GetRecordedFormatsKnown() {
		ml.RecordedFormats = []int{}
		for _, f := range resp.GetRecordedFormats() {
			ml.RecordedFormats = append(ml.RecordedFormats, int(f))
		}
	}
	return ml, nil
}

// Partitions returns the partition table.
func (c *Client) Partitions(ctx context.Context) (PartitionTable, error) {
	resp, err := invoke(ctx, c, idempotent, c.admin.Partitions, &rivetv1.PartitionsRequest{})
	if err != nil {
		return PartitionTable{}, err
	}
	out := PartitionTable{Count: resp.GetPartitionCount(), Owners: make([]PartitionOwner, len(resp.GetPartitions())), Note: resp.GetNote()}
	for i, p := range resp.GetPartitions() {
		out.Owners[i] = PartitionOwner{Partition: p.GetPartition(), Owner: p.GetOwner(), Token: p.GetToken()}
	}
	return out, nil
}

// Stats returns the counters of the node the client is connected to.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	return c.StatsOf(ctx, "")
}

// StatsOf returns the counters of the node of that ID (Members lists
// them), which the node the client is connected to asks; "" for that node.
// rivet.ErrNotFound if no such node is registered. A node from before
// StatsOf answers with its own: check Stats.NodeID.
func (c *Client) StatsOf(ctx context.Context, node string) (Stats, error) {
	resp, err := invoke(ctx, c, idempotent, c.admin.Stats, &rivetv1.StatsRequest{NodeId: node})
	if err != nil {
		return Stats{}, err
	}
	return Stats{
		NodeID:          resp.GetNodeId(),
		ActiveActors:    resp.GetActiveActors(),
		Calls:           resp.GetCalls(),
		Commits:         resp.GetCommits(),
		CommitBatches:   resp.GetCommitBatches(),
		PartitionsOwned: resp.GetPartitionsOwned(),
	}, nil
}

// MaxHotActors is the most HotActors asks one node for.
const MaxHotActors = 1000

// HotActors returns up to n of the actors in memory on the node of that ID
// ("" for the node the client is connected to) with the most turns per
// second lately, the busiest first: where a node's load goes, by key,
// which its metrics (labelled by actor type) do not say. n is 1 to
// MaxHotActors. A node from before it counts no turns: HotActors fails
// saying so (rivet.ErrFailedPrecondition), as it does when an older node
// asked for another answers with its own counters.
func (c *Client) HotActors(ctx context.Context, node string, n int) ([]HotActor, error) {
	if n < 1 || n > MaxHotActors {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "hot actors: ask for 1 to %d, not %d", MaxHotActors, n)
	}
	resp, err := invoke(ctx, c, idempotent, c.admin.Stats, &rivetv1.StatsRequest{NodeId: node, Hot: uint32(n)})
	if err != nil {
		return nil, err
	}
	if node != "" && resp.GetNodeId() != node {
		return nil, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s answered for itself, not for node %s: it is older than HotActors of another node", resp.GetNodeId(), node)
	}
	if !resp.GetHotCounted() {
		if node != "" {
			// Asked through the node connected to, which may be the
			// older one: it passes the request on without hot.
			return nil, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's answer counts no turns: it, or the node asked through, is older than HotActors", resp.GetNodeId())
		}
		return nil, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s is older than HotActors: it does not count its actors' turns", resp.GetNodeId())
	}
	out := make([]HotActor, len(resp.GetHotActors()))
	for i, h := range resp.GetHotActors() {
		out[i] = HotActor{
			Name: h.GetName(), Key: h.GetKey(), Node: resp.GetNodeId(), Partition: h.GetPartition(),
			TurnsPerSecond: h.GetTurnsPerSecond(), Turns: h.GetTurns(), WaitedSeconds: h.GetWaitedSeconds(),
			Since: timeFrom(h.GetSince()), Waiting: h.GetWaiting(),
		}
	}
	return out, nil
}

// RetryingQuery says which of a node's retrying workflows
// Client.RetryingWorkflows asks for.
type RetryingQuery struct {
	// Limit is the most returned, 1 to MaxHotActors.
	Limit int
	// Name keeps only the actors of that name; "" keeps all.
	Name string
	// ErrorContains keeps only the steps whose last error contains it,
	// and the actors with one; "" keeps all.
	ErrorContains string
}

// RetryingWorkflows returns up to q.Limit of the actors in memory on the
// node of that ID ("" for the node the client is connected to) whose
// workflow retries a step now (a step at its second attempt or later,
// running or waiting out their backoff), by name and key, filtered by
// q's name and error before the node's cut. Only actors in memory are
// known: a workflow whose backoff outlasts its actor's idle timeout
// leaves memory until its wakeup, and is not listed meanwhile. A node
// from before it fails it with rivet.ErrFailedPrecondition (reason
// node.unsupported), as does an older node asked for another.
func (c *Client) RetryingWorkflows(ctx context.Context, node string, q RetryingQuery) (RetryingList, error) {
	if q.Limit < 1 || q.Limit > MaxHotActors {
		return RetryingList{}, rivet.Errorf(rivet.ErrInvalidArgument, "retrying workflows: ask for 1 to %d, not %d", MaxHotActors, q.Limit)
	}
	resp, err := invoke(ctx, c, idempotent, c.admin.Stats, &rivetv1.StatsRequest{
		NodeId: node, Retrying: uint32(q.Limit), RetryingName: q.Name, RetryingErrorContains: q.ErrorContains,
	})
	if err != nil {
		return RetryingList{}, err
	}
	if node != "" && resp.GetNodeId() != node {
		return RetryingList{}, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "node %s answered for itself, not for node %s: it is older than retrying workflows of another node; upgrade it", resp.GetNodeId(), node)
	}
	if !resp.GetRetryingCounted() {
		// Asked through the node connected to, which may be the older
		// one: it passes the request on without retrying.
		return RetryingList{}, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "node %s does not list retrying workflows (it, or the node asked through, is older than it); upgrade it", resp.GetNodeId())
	}
	l := RetryingList{Omitted: int(resp.GetRetryingOmitted())}
	for _, r := range resp.GetRetryingWorkflows() {
		l.Workflows = append(l.Workflows, RetryingWorkflow{
			Name: r.GetName(), Key: r.GetKey(), Node: resp.GetNodeId(), Partition: r.GetPartition(),
			Steps: pendingStepsFrom(r.GetSteps()), StepsOmitted: int(r.GetStepsOmitted()),
		})
	}
	return l, nil
}

// Drain asks node to hand every partition it owns to the other nodes (with
// undo, to take its share again). It returns at once, with the number of
// partitions the node owned; Members shows the progress. Any node forwards
// the request to node.
func (c *Client) Drain(ctx context.Context, node string, undo bool) (uint32, error) {
	resp, err := invoke(ctx, c, idempotent, c.admin.Drain, &rivetv1.DrainRequest{NodeId: node, Undo: undo})
	if err != nil {
		return 0, err
	}
	return resp.GetPartitionsOwned(), nil
}

// Healthy reports whether the node the client is connected to serves:
// its gRPC health service says SERVING (once it has settled its
// partitions). It does not retry. A client of several addresses asks
// whichever of them the call reaches (see New).
func (c *Client) Healthy(ctx context.Context) (bool, error) {
	resp, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return false, fromStatus(ctx, status.Convert(err)) // a *rivet.Error, as from every call
	}
	return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
}

// defaultPort is DefaultEndpoint's port.
func defaultPort() string {
	_, port, _ := net.SplitHostPort(DefaultEndpoint)
	return port
}

// LogLevel is a node's log level (Client.LogLevel, SetLogLevel).
type LogLevel struct {
	NodeID string `json:"node_id"`
	// Level is the node's level now; Previous, after SetLogLevel, the one
	// before it.
	Level    string `json:"level"`
	Previous string `json:"previous_level,omitempty"`
	// RevertLevel and RevertAt are a pending revert's (SetLogLevel's
	// revertAfter): the level the node sets by itself at RevertAt.
	RevertLevel string    `json:"revert_level,omitempty"`
	RevertAt    time.Time `json:"revert_at,omitzero"`
}

// LogLevel returns the log level of the node of that ID ("" for the node
// the client is connected to), which that node asks. A node older than
// LogLevel, the one connected to or the one named, fails it with
// rivet.ErrFailedPrecondition (reason node.unsupported) saying which.
func (c *Client) LogLevel(ctx context.Context, node string) (LogLevel, error) {
	return c.logLevel(ctx, &rivetv1.LogLevelRequest{NodeId: node})
}

// SetLogLevel sets the log level of the node of that ID ("" for the node
// the client is connected to) to level (debug, info, warn or error; any
// other is rivet.ErrInvalidArgument), until it is set again, or, if
// revertAfter is not 0, for that long: the node then sets the level it had
// before by itself. The level is not stored: a restart of the node takes
// its --log-level again. A node's logger whose level cannot change fails
// it with rivet.ErrFailedPrecondition, as LogLevel does an older node.
func (c *Client) SetLogLevel(ctx context.Context, node, level string, revertAfter time.Duration) (LogLevel, error) {
	if level == "" {
		return LogLevel{}, rivet.Errorf(rivet.ErrInvalidArgument, "set log level: the level is empty (debug, info, warn or error)")
	}
	if revertAfter < 0 {
		return LogLevel{}, rivet.Errorf(rivet.ErrInvalidArgument, "set log level: revert after %v: negative", revertAfter)
	}
	req := &rivetv1.LogLevelRequest{NodeId: node, Level: level}
	if revertAfter > 0 {
		req.RevertAfter = durationpb.New(revertAfter)
	}
	return c.logLevel(ctx, req)
}

func (c *Client) logLevel(ctx context.Context, req *rivetv1.LogLevelRequest) (LogLevel, error) {
	// Idempotent: a set sent twice sets the same level, and a revert
	// pending keeps its level (the node's rule), so only its time moves.
	resp, err := invoke(ctx, c, idempotent, func(ctx context.Context, req *rivetv1.LogLevelRequest, opts ...grpc.CallOption) (*rivetv1.LogLevelResponse, error) {
		var p peer.Peer
		resp, err := c.admin.LogLevel(ctx, req, append(opts, grpc.Peer(&p))...)
		if status.Code(err) == codes.Unimplemented {
			// The node connected to is older (a node it asks on the
			// caller's behalf says so itself): gRPC's "unknown method"
			// would read as a bug.
			at := "the node connected to"
			if p.Addr != nil {
				at = "the node at " + p.Addr.String()
			}
			st, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "%s does not support log-level (it is older than it); upgrade it", at))
			return nil, st.Err()
		}
		return resp, err
	}, req)
	if err != nil {
		return LogLevel{}, err
	}
	return LogLevel{
		NodeID: resp.GetNodeId(), Level: resp.GetLevel(), Previous: resp.GetPreviousLevel(),
		RevertLevel: resp.GetRevertLevel(), RevertAt: timeFrom(resp.GetRevertAt()),
	}, nil
}
