package server

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
)

// Backend is what the services need from a node: the methods of
// runtime.Host. It is declared here, where it is consumed, so that tests
// can serve a fake and the server does not depend on how the host works.
//
// Errors should wrap the rivet sentinels (as *rivet.Error); any other error
// reaches the client as INTERNAL "internal error" and is logged.
type Backend interface {
	Call(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error)
	Send(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error)
	// CreateWith creates an actor (runtime.Host.CreateWith); duplicate
	// says that a Create with the same idempotency key created it before.
	CreateWith(ctx context.Context, ref runtime.Ref, input json.RawMessage, opts runtime.CreateOptions) (info runtime.ActorInfo, duplicate bool, err error)
	GetOrCreate(ctx context.Context, ref runtime.Ref, input json.RawMessage) (runtime.ActorInfo, bool, error)
	Get(ctx context.Context, ref runtime.Ref) (runtime.ActorInfo, error)
	Destroy(ctx context.Context, ref runtime.Ref) error
	Inspect(ctx context.Context, ref runtime.Ref) (runtime.Inspection, error)
	List(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error)
	HistoryPage(ctx context.Context, ref runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error)
	RetryWorkflowWith(ctx context.Context, ref runtime.Ref, opts runtime.RetryOptions) (runtime.RetryResult, error)
	CancelWorkflow(ctx context.Context, ref runtime.Ref, reason string) (string, error)
	CancelScheduledCall(ctx context.Context, ref runtime.Ref, id string) (bool, error)
	// Subscribe subscribes to the events of an actor this node serves (see
	// runtime.Host.Subscribe).
	Subscribe(ctx context.Context, ref runtime.Ref, events []string) (EventStream, error)
	Members(ctx context.Context) ([]runtime.Member, error)
	Partitions(ctx context.Context) (count uint32, owners []runtime.PartitionOwner, err error)
	Stats() runtime.Stats
	// Drain starts (or, with undo, ends) the drain of node and returns the
	// partitions it owned when asked.
	Drain(ctx context.Context, node string, undo bool) (uint32, error)
}

// Server implements rivetv1.ActorServiceServer and
// rivetv1.AdminServiceServer over a Backend. It holds no per-call state;
// all methods are safe for concurrent use.
type Server struct {
	rivetv1.UnimplementedActorServiceServer
	rivetv1.UnimplementedAdminServiceServer

	backend Backend
	limits  Limits
	log     *zap.Logger
	// router, if set, sends Subscribe streams of actors other nodes serve
	// to their owner (unary calls go by ForwardingInterceptor).
	router Router
	// stopping closes on Shutdown: the streams end.
	stopping chan struct{}
	stopOnce sync.Once
	// streams counts the Subscribe and Backup streams served or relayed now.
	streams atomic.Int64
}

var (
	_ rivetv1.ActorServiceServer = (*Server)(nil)
	_ rivetv1.AdminServiceServer = (*Server)(nil)
)

// Option configures a Server.
type Option func(*Server)

// WithLimits sets the payload limits; zero fields take the defaults. Pass
// the same Limits to ServerOptions, or gRPC may refuse a large request
// before the server can explain which limit it broke.
func WithLimits(l Limits) Option {
	return func(s *Server) { s.limits = l.withDefaults() }
}

// WithLogger sets the logger for masked internal errors. Default: none.
func WithLogger(log *zap.Logger) Option {
	return func(s *Server) {
		if log != nil {
			s.log = log
		}
	}
}

// WithRouter makes the Server relay the Subscribe streams of actors that
// other nodes serve, as ForwardingInterceptor forwards unary calls.
func WithRouter(r Router) Option {
	return func(s *Server) { s.router = r }
}

// New returns a Server over backend with DefaultLimits and no logging,
// unless opts say otherwise.
func New(backend Backend, opts ...Option) *Server {
	s := &Server{backend: backend, limits: DefaultLimits(), log: zap.NewNop(), stopping: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Shutdown ends the Subscribe streams, served or relayed, with UNAVAILABLE
// (their subscribers subscribe again, through another node), so that a
// gRPC GracefulStop is not held up by them: they never end by themselves.
func (s *Server) Shutdown() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Register adds the ActorService and AdminService to gs. Health and
// reflection are the node's to register: only the node knows when it is
// serving.
func (s *Server) Register(gs *grpc.Server) {
	rivetv1.RegisterActorServiceServer(gs, s)
	rivetv1.RegisterAdminServiceServer(gs, s)
}
