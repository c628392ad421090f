package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
)

// Created is the creation time Fake gives every actor, so that outputs are
// stable.
var Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Fake is an in-memory Backend. Out of the box it hosts counters: any actor
// name, state {"count":N}, actions "increment" (one integer argument,
// returns the new count) and "getCount"; every queue accepts any message,
// and a send with wait completes at once with the body as response. Actors
// live in partition hash(name, key) % 16, owned by "node-1".
//
// A test scripts other answers through the ...Func fields, which replace
// the built-in behaviour of one method. Set them before serving.
type Fake struct {
	CallFunc    func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error)
	SendFunc    func(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error)
	GetFunc     func(ctx context.Context, ref runtime.Ref) (runtime.ActorInfo, error)
	InspectFunc func(ctx context.Context, ref runtime.Ref) (runtime.Inspection, error)
	// HistoryFunc answers History (by default: an empty history for an
	// actor that exists); ListFunc answers List.
	HistoryFunc func(ctx context.Context, ref runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error)
	ListFunc    func(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error)
	// CancelScheduledCallFunc answers CancelScheduledCall.
	CancelScheduledCallFunc func(ref runtime.Ref, id string) (bool, error)
	// SubscribeFunc answers Subscribe (by default: the actor has no
	// events).
	SubscribeFunc func(ctx context.Context, ref runtime.Ref, events []string) (server.EventStream, error)
	// MembersFunc answers Members (by default: MemberList), PartitionsFunc
	// Partitions (by default: PartitionCount and PartitionTable).
	MembersFunc    func(ctx context.Context) ([]runtime.Member, error)
	PartitionsFunc func(ctx context.Context) (uint32, []runtime.PartitionOwner, error)
	// BackupFunc answers Backup (by default: the fake has no storage to
	// back up).
	BackupFunc func(ctx context.Context) (size int64, member string, r io.ReadCloser, err error)

	// MemberList and PartitionTable are what Members and Partitions
	// return.
	MemberList     []runtime.Member
	PartitionCount uint32
	PartitionTable []runtime.PartitionOwner
	NodeStats      runtime.Stats
	// Hot is what HotActors answers (up to its limit).
	Hot []runtime.HotActor
	// Formats is what RecordedFormats answers; nil fails it, as a node
	// that cannot read them from etcd.
	Formats []int

	mu     sync.Mutex
	actors map[string]*fakeActor
	nextID uint64
}

var (
	_ server.Backend           = (*Fake)(nil)
	_ server.RecordedFormatser = (*Fake)(nil)
)

type fakeActor struct {
	info   runtime.ActorInfo
	state  json.RawMessage
	input  json.RawMessage
	queues map[string][]json.RawMessage
	// createKey is the idempotency key of the Create that created it.
	createKey string
}

// NewFake returns an empty Fake with one member, of storage format 4, and
// 16 partitions, all owned by node-1; formats 2 to 4 recorded.
func NewFake() *Fake {
	f := &Fake{
		actors:         map[string]*fakeActor{},
		MemberList:     []runtime.Member{{NodeID: "node-1", GRPCAddr: "127.0.0.1:6420", State: "alive", PartitionsOwned: 16, StartedAt: Created, Build: "rivet (devel) 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8", StorageFormat: 4}},
		Formats:        []int{2, 3, 4},
		PartitionCount: 16,
		NodeStats:      runtime.Stats{NodeID: "node-1", ActiveActors: 1, Calls: 2, Commits: 3, CommitBatches: 1, PartitionsOwned: 16},
	}
	for p := range uint32(16) {
		f.PartitionTable = append(f.PartitionTable, runtime.PartitionOwner{Partition: p, Owner: "node-1", Token: int64(100 + p)})
	}
	return f
}

// KeyText prints a key in error messages as the runtime does.
func KeyText(key []string) string {
	b, _ := json.Marshal(key)
	return string(b)
}

func id(ref runtime.Ref) string {
	return ref.Name + "\x00" + strings.Join(ref.Key, "\x00")
}

func notFound(ref runtime.Ref) error {
	return rivet.Errorf(rivet.ErrNotFound, "actor %s %s does not exist", ref.Name, KeyText(ref.Key))
}

// lookup finds or (with create) creates an actor. f.mu must be held.
func (f *Fake) lookup(ref runtime.Ref, create bool, input json.RawMessage) (*fakeActor, bool, error) {
	if a, ok := f.actors[id(ref)]; ok {
		return a, false, nil
	}
	if !create {
		return nil, false, notFound(ref)
	}
	h := fnv.New32a()
	h.Write([]byte(id(ref)))
	a := &fakeActor{
		info:   runtime.ActorInfo{Ref: ref, CreatedAt: Created, Partition: h.Sum32() % 16, Owner: "node-1"},
		state:  json.RawMessage(`{"count":0}`),
		input:  input,
		queues: map[string][]json.RawMessage{},
	}
	f.actors[id(ref)] = a
	return a, true, nil
}

// Call implements Backend.
func (f *Fake) Call(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
	if f.CallFunc != nil {
		return f.CallFunc(ctx, req)
	}
	if req.ReadOnly && req.Action == "increment" { // as a node refuses it
		return nil, rivet.Reasonf(rivet.ErrFailedPrecondition, "actor", "not_read_only", "action increment of %s is not read-only", req.Ref.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a, _, err := f.lookup(req.Ref, req.CreateIfMissing, req.Input)
	if err != nil {
		return nil, err
	}
	var st struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(a.state, &st); err != nil {
		return nil, err
	}
	switch req.Action {
	case "increment":
		var args []int
		if err := json.Unmarshal(req.Args, &args); err != nil || len(args) != 1 {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "increment takes one integer argument")
		}
		st.Count += args[0]
		a.state, _ = json.Marshal(st)
	case "getCount":
	default:
		return nil, rivet.Errorf(rivet.ErrUnknownAction, "actor %s has no action %q", req.Ref.Name, req.Action)
	}
	return json.RawMessage(strconv.Itoa(st.Count)), nil
}

// Send implements Backend.
func (f *Fake) Send(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
	if f.SendFunc != nil {
		return f.SendFunc(ctx, req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a, _, err := f.lookup(req.Ref, req.CreateIfMissing, req.Input)
	if err != nil {
		return runtime.SendResult{}, err
	}
	f.nextID++
	if req.Wait {
		return runtime.SendResult{MessageID: f.nextID, Status: runtime.SendCompleted, Response: req.Body}, nil
	}
	a.queues[req.Queue] = append(a.queues[req.Queue], req.Body)
	return runtime.SendResult{MessageID: f.nextID, Status: runtime.SendEnqueued}, nil
}

// CreateWith implements Backend: an actor created with the same key is a
// duplicate if its input is the same bytes (a node compares JSON values).
func (f *Fake) CreateWith(_ context.Context, ref runtime.Ref, input json.RawMessage, opts runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.actors[id(ref)]; ok {
		if k := opts.IdempotencyKey; k != "" && a.createKey == k {
			if !bytes.Equal(a.input, input) {
				return runtime.ActorInfo{}, false, rivet.Errorf(rivet.ErrInvalidArgument, "actor %s %s was created with idempotency key %q and another input", ref.Name, KeyText(ref.Key), k)
			}
			return a.info, true, nil
		}
		return runtime.ActorInfo{}, false, rivet.Errorf(rivet.ErrAlreadyExists, "actor %s %s already exists", ref.Name, KeyText(ref.Key))
	}
	a, _, err := f.lookup(ref, true, input)
	if err != nil {
		return runtime.ActorInfo{}, false, err
	}
	a.createKey = opts.IdempotencyKey
	return a.info, false, nil
}

// GetOrCreate implements Backend.
func (f *Fake) GetOrCreate(_ context.Context, ref runtime.Ref, input json.RawMessage) (runtime.ActorInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, created, err := f.lookup(ref, true, input)
	if err != nil {
		return runtime.ActorInfo{}, false, err
	}
	return a.info, created, nil
}

// Get implements Backend.
func (f *Fake) Get(ctx context.Context, ref runtime.Ref) (runtime.ActorInfo, error) {
	if f.GetFunc != nil {
		return f.GetFunc(ctx, ref)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a, _, err := f.lookup(ref, false, nil)
	if err != nil {
		return runtime.ActorInfo{}, err
	}
	return a.info, nil
}

// Destroy implements Backend.
func (f *Fake) Destroy(_ context.Context, ref runtime.Ref) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.actors[id(ref)]; !ok {
		return notFound(ref)
	}
	delete(f.actors, id(ref))
	return nil
}

// Inspect implements Backend.
func (f *Fake) Inspect(ctx context.Context, ref runtime.Ref) (runtime.Inspection, error) {
	if f.InspectFunc != nil {
		return f.InspectFunc(ctx, ref)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a, _, err := f.lookup(ref, false, nil)
	if err != nil {
		return runtime.Inspection{}, err
	}
	in := runtime.Inspection{Info: a.info, State: a.state, Active: true}
	names := make([]string, 0, len(a.queues))
	for q := range a.queues {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		in.Queues = append(in.Queues, runtime.QueueDepth{Queue: q, Depth: uint64(len(a.queues[q]))})
	}
	return in, nil
}

// List implements Backend: actors sorted by name and key; the page token
// is the index of the next actor.
func (f *Fake) List(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
	if f.ListFunc != nil {
		return f.ListFunc(ctx, opts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []runtime.ActorInfo
	for _, a := range f.actors {
		if opts.FailedWorkflows {
			break // the fake hosts no workflows
		}
		if opts.Name == "" || a.info.Ref.Name == opts.Name {
			all = append(all, a.info)
		}
	}
	sort.Slice(all, func(i, j int) bool { return id(all[i].Ref) < id(all[j].Ref) })
	start := 0
	if opts.PageToken != "" {
		n, err := strconv.Atoi(opts.PageToken)
		if err != nil || n < 0 || n > len(all) {
			return runtime.ListResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token %q", opts.PageToken)
		}
		start = n
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	end := min(start+limit, len(all))
	res := runtime.ListResult{Actors: all[start:end]}
	if end < len(all) {
		res.NextPageToken = strconv.Itoa(end)
	}
	return res, nil
}

// Members implements Backend.
// HistoryPage returns an empty history for any existing actor.
func (f *Fake) HistoryPage(ctx context.Context, ref runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
	if f.HistoryFunc != nil {
		return f.HistoryFunc(ctx, ref, opts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, _, err := f.lookup(ref, false, nil); err != nil {
		return runtime.History{}, err
	}
	return runtime.History{}, nil
}

// RetryWorkflowWith refuses: the fake hosts no workflows.
func (f *Fake) RetryWorkflowWith(_ context.Context, ref runtime.Ref, _ runtime.RetryOptions) (runtime.RetryResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, _, err := f.lookup(ref, false, nil); err != nil {
		return runtime.RetryResult{}, err
	}
	return runtime.RetryResult{}, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow", ref.Name)
}

// CancelWorkflow refuses: the fake hosts no workflows.
func (f *Fake) CancelWorkflow(_ context.Context, ref runtime.Ref, _ string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, _, err := f.lookup(ref, false, nil); err != nil {
		return "", err
	}
	return "", rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow", ref.Name)
}

func (f *Fake) Members(ctx context.Context) ([]runtime.Member, error) {
	if f.MembersFunc != nil {
		return f.MembersFunc(ctx)
	}
	return f.MemberList, nil
}

// RecordedFormats implements server.RecordedFormatser: Formats.
func (f *Fake) RecordedFormats(context.Context) ([]int, error) {
	if f.Formats == nil {
		return nil, rivet.Errorf(rivet.ErrUnavailable, "the fake's recorded formats are unknown")
	}
	return f.Formats, nil
}

// Partitions implements Backend.
func (f *Fake) Partitions(ctx context.Context) (uint32, []runtime.PartitionOwner, error) {
	if f.PartitionsFunc != nil {
		return f.PartitionsFunc(ctx)
	}
	return f.PartitionCount, f.PartitionTable, nil
}

// Stats implements Backend.
func (f *Fake) Stats() runtime.Stats { return f.NodeStats }

// HotActors implements server.HotActorser.
func (f *Fake) HotActors(limit int) []runtime.HotActor { return f.Hot[:min(limit, len(f.Hot))] }

// Backup implements server.Backuper through BackupFunc.
func (f *Fake) Backup(ctx context.Context) (int64, string, io.ReadCloser, error) {
	if f.BackupFunc != nil {
		return f.BackupFunc(ctx)
	}
	return 0, "", nil, rivet.Errorf(rivet.ErrFailedPrecondition, "this fake node has no storage to back up")
}

// Drain records nothing: a fake has no partitions to move.
func (f *Fake) Drain(ctx context.Context, node string, undo bool) (uint32, error) {
	return 0, rivet.Errorf(rivet.ErrNotFound, "no node %q", node)
}

// CancelScheduledCall finds nothing: the fake schedules no calls (a test
// scripts Inspect's through InspectFunc).
func (f *Fake) CancelScheduledCall(_ context.Context, ref runtime.Ref, id string) (bool, error) {
	if f.CancelScheduledCallFunc != nil {
		return f.CancelScheduledCallFunc(ref, id)
	}
	return false, nil
}

// Subscribe answers through SubscribeFunc; without it, the fake's actors
// declare no events.
func (f *Fake) Subscribe(ctx context.Context, ref runtime.Ref, events []string) (server.EventStream, error) {
	if f.SubscribeFunc != nil {
		return f.SubscribeFunc(ctx, ref, events)
	}
	return nil, rivet.Errorf(rivet.ErrUnknownEvent, "actor %s has no events", ref.Name)
}
