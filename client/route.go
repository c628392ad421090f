package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// router sends each actor request straight to the node that owns the
// actor's partition, from a copy of the partition table it refreshes in
// the background, so that calls take no forwarding hop. Everything else,
// and every request it cannot place, goes to the node the client was made
// with, which forwards as needed: a stale table costs a hop, never an
// error. It implements grpc.ClientConnInterface.
type router struct {
	seed  *grpc.ClientConn
	admin rivetv1.AdminServiceClient
	dial  []grpc.DialOption
	every time.Duration

	mu     sync.Mutex
	count  uint32
	owners []string          // node ID by partition
	addrs  map[string]string // gRPC address by node ID
	conns  map[string]*grpc.ClientConn
	// inUse counts the calls and streams on each connection (pick, done):
	// one dropped from conns as its node left the table is retired, and
	// closed as the last of them ends, not under them (a call cut off
	// that way may have run, and could not be sent on again).
	inUse     map[*grpc.ClientConn]int
	retired   map[*grpc.ClientConn]bool
	bad       map[string]time.Time // addresses that failed to dial, until
	fetched   time.Time
	refreshed chan struct{} // while a refresh runs: closed as it ends
	closed    bool
	wg        sync.WaitGroup
	// ctx bounds the refreshes; close cancels it, so that it does not
	// wait out a refresh against a node that does not answer.
	ctx  context.Context
	stop context.CancelFunc
}

// badFor is how long an address that could not be dialed is avoided (it
// may be a container address this client cannot reach).
const badFor = 30 * time.Second

func newRouter(seed *grpc.ClientConn, dial []grpc.DialOption, every time.Duration) *router {
	ctx, stop := context.WithCancel(context.Background())
	return &router{
		seed: seed, admin: rivetv1.NewAdminServiceClient(seed), dial: dial, every: every,
		conns: map[string]*grpc.ClientConn{}, bad: map[string]time.Time{},
		inUse: map[*grpc.ClientConn]int{}, retired: map[*grpc.ClientConn]bool{},
		ctx: ctx, stop: stop,
	}
}

type actorRequest interface{ GetActor() *rivetv1.ActorRef }

// Invoke implements grpc.ClientConnInterface.
func (r *router) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	conn, addr := r.pick(args)
	if conn == nil {
		return r.seed.Invoke(ctx, method, args, reply, opts...)
	}
	p := peer.Peer{Addr: noPeer}
	err := conn.Invoke(ctx, method, args, reply, append(opts, grpc.Peer(&p))...)
	r.done(conn)
	if r.unreached(addr, err, p.Addr != noPeer) {
		return r.seed.Invoke(ctx, method, args, reply, opts...)
	}
	return err
}

// unreached reports whether err says that the owner at addr could not be
// reached at all (the request was not sent: it never had a connection, see
// attempt, or its error says so). Then the address is avoided for a while
// and the table refreshed; the caller lets the seed node forward the
// request.
func (r *router) unreached(addr string, err error, connected bool) bool {
	if err == nil {
		return false
	}
	if st := status.Convert(err); st.Code() != codes.Unavailable || connected && !rpcerr.NotSent(st) {
		return false
	}
	r.mu.Lock()
	r.bad[addr] = time.Now().Add(badFor)
	r.fetched = time.Time{}
	r.mu.Unlock()
	return true
}

// NewStream implements grpc.ClientConnInterface. A stream's request is not
// known here, so streams go to the seed; Subscribe picks its owner itself
// (ActorHandle.subscribe).
func (r *router) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return r.seed.NewStream(ctx, desc, method, opts...)
}

// dropConns drops the connections to nodes no longer members at all (not
// in live) and returns those to close now; those in use are retired, and
// closed by their last use's done. Called with mu held.
func (r *router) dropConns(live map[string]bool) (closeNow []*grpc.ClientConn) {
	for addr, c := range r.conns {
		if live[addr] {
			continue
		}
		delete(r.conns, addr)
		if r.inUse[c] > 0 {
			r.retired[c] = true
		} else {
			closeNow = append(closeNow, c)
		}
	}
	return closeNow
}

// done ends a use of c that pick began, closing c if it was the last use
// of a retired connection.
func (r *router) done(c *grpc.ClientConn) {
	r.mu.Lock()
	n := r.inUse[c] - 1
	last := n <= 0 && r.retired[c]
	if n <= 0 {
		delete(r.inUse, c)
		delete(r.retired, c)
	} else {
		r.inUse[c] = n
	}
	r.mu.Unlock()
	if last {
		c.Close()
	}
}

// pick returns the connection to the owner of the request's actor, or nil
// for the seed. A connection it returns is in use until done.
func (r *router) pick(args any) (*grpc.ClientConn, string) {
	r.maybeRefresh()
	ar, ok := args.(actorRequest)
	if !ok || ar.GetActor() == nil {
		return nil, ""
	}
	if _, ok := args.(proto.Message); !ok {
		return nil, ""
	}
	a := ar.GetActor()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == 0 || r.closed {
		return nil, ""
	}
	p := placement.Partition(a.GetName(), storage.EncodeKey(a.GetKey()), r.count)
	addr := r.addrs[r.owners[p]]
	if addr == "" || time.Now().Before(r.bad[addr]) {
		return nil, ""
	}
	c, ok := r.conns[addr]
	if !ok {
		var err error
		if c, err = grpc.NewClient(addr, r.dial...); err != nil {
			return nil, ""
		}
		r.conns[addr] = c
	}
	if c.GetState() != connectivity.Ready {
		// Not connected (yet, or at all: an address this client cannot
		// reach, a certificate that does not name it): the seed forwards
		// meanwhile, and the connection is tried in the background. A
		// call on it would wait for the dial, or fail.
		c.Connect()
		return nil, ""
	}
	r.inUse[c]++
	return c, addr
}

// maybeRefresh starts a refresh of the table if it is older than every
// and none runs.
func (r *router) maybeRefresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.refreshed != nil || time.Since(r.fetched) < r.every {
		return
	}
	r.startRefresh()
}

// startRefresh starts a refresh of the table. Called with mu held, none
// running.
func (r *router) startRefresh() {
	done := make(chan struct{})
	r.refreshed = done
	r.wg.Add(1)
	go r.refresh(done)
}

// refreshNow waits for a refresh of the table that starts after it was
// called or runs already (it may have asked before the change: a refresh
// is cheap, a stream relayed for its whole life is not), or for ctx.
func (r *router) refreshNow(ctx context.Context) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if r.refreshed == nil {
		r.startRefresh()
	}
	done := r.refreshed
	r.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (r *router) refresh(done chan struct{}) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	tab, err := r.admin.Partitions(ctx, &rivetv1.PartitionsRequest{})
	var ms *rivetv1.MembersResponse
	if err == nil {
		ms, err = r.admin.Members(ctx, &rivetv1.MembersRequest{})
	}
	var stale []*grpc.ClientConn
	defer func() {
		for _, c := range stale {
			c.Close()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(done)
	r.refreshed = nil
	r.fetched = time.Now()
	if err != nil {
		return // keep the old table; the seed forwards meanwhile
	}
	r.count = tab.GetPartitionCount()
	r.owners = make([]string, r.count)
	for _, o := range tab.GetPartitions() {
		if o.GetPartition() < r.count {
			r.owners[o.GetPartition()] = o.GetOwner()
		}
	}
	r.addrs = map[string]string{}
	live := map[string]bool{}
	for _, m := range ms.GetMembers() {
		live[m.GetGrpcAddr()] = true
		if m.GetState() == "alive" || m.GetState() == "unknown" {
			r.addrs[m.GetNodeId()] = m.GetGrpcAddr()
		}
	}
	stale = r.dropConns(live) // closed once mu is released
	for addr, until := range r.bad {
		if time.Now().After(until) {
			delete(r.bad, addr)
		}
	}
}

func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	conns := make([]*grpc.ClientConn, 0, len(r.conns)+len(r.retired))
	for _, c := range r.conns {
		conns = append(conns, c)
	}
	for c := range r.retired {
		conns = append(conns, c)
	}
	r.conns = map[string]*grpc.ClientConn{}
	r.retired = map[*grpc.ClientConn]bool{}
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
	for _, c := range conns {
		c.Close()
	}
}
