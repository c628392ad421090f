package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// The node's metrics come from two places, and neither the runtime nor the
// storage package knows Prometheus:
//
//   - counters and gauges are plain atomics in the runtime and the
//     committer (runtime.Stats, storage.CommitterStats), read at scrape
//     time by collector;
//   - distributions (turn, call and commit durations, batch sizes) reach
//     metrics through the runtime.Observer and storage.CommitObserver
//     hooks, once per turn, call or store transaction, and go into
//     Prometheus histograms (a few atomic adds each).
//
// No metric is labelled by actor key. The call and workflow metrics are
// labelled by actor name, which takes only the registry's names (an
// unregistered one counts as ""); every other label takes a handful of
// fixed values.

// metrics holds the histograms and the labelled call counter, fed by the
// runtime and the committer. It implements runtime.Observer and
// storage.CommitObserver.
type metrics struct {
	turnDur *prometheus.HistogramVec
	// waits is turnWait's child of each kind, as turns is turnDur's.
	turnWait *prometheus.HistogramVec
	waits    [runtime.NumTurnKinds]prometheus.Observer
	// turns holds turnDur's child of each kind, so that the hot path does
	// no label lookup.
	turns [runtime.NumTurnKinds]prometheus.Observer

	callDur *prometheus.HistogramVec
	calls   *prometheus.CounterVec
	// byAction holds, per actor and action name, the children of callDur
	// and calls that every call uses, so that the hot path does one map
	// read.
	byAction sync.Map // actionKey -> *actorCalls

	batchTxns, batchOps, commitDur prometheus.Histogram
}

var (
	_ runtime.Observer       = (*metrics)(nil)
	_ runtime.WaitObserver   = (*metrics)(nil)
	_ runtime.ActionObserver = (*metrics)(nil)
	_ storage.CommitObserver = (*metrics)(nil)
)

func newMetrics() *metrics {
	m := &metrics{
		turnDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rivet_turn_duration_seconds",
			Help:    "Time an actor turn held the actor's gate (the action's or step's code and its writes, not the commit), by kind: action, send, step, receive, admin.",
			Buckets: []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .1, 1, 10},
		}, []string{"kind"}),
		turnWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rivet_turn_wait_seconds",
			Help:    "Time an actor turn waited for the actor's gate (the turns ahead of it on the same actor: contention on hot actors), by kind: action, send, step, receive, admin.",
			Buckets: []float64{1e-6, 10e-6, 100e-6, .001, .01, .1, 1, 10},
		}, []string{"kind"}),
		callDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rivet_call_duration_seconds",
			Help:    "Time from admitting an action call on the node that runs it until its reply is ready (its writes durable), by actor name, action name and outcome (ok or error).",
			Buckets: []float64{100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"actor", "action", "outcome"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rivet_calls_total",
			Help: "Action calls run by this node (forwarded calls count on the node that runs them), by actor name and action name (empty for an unregistered one), outcome (code: ok, or the group.code of the error's kind; user for errors actors return on purpose, canceled) and reason (the group.code the caller gets, such as storage.no_space or actor.overloaded; empty for ok, user, canceled and errors without one).",
		}, []string{"actor", "action", "code", "reason"}),
		batchTxns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rivet_commit_batch_size",
			Help:    "Callers' transactions per store (etcd) transaction of the group committer.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rivet_commit_batch_ops",
			Help:    "Operations (puts and deletes) per store (etcd) transaction of the group committer.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rivet_commit_duration_seconds",
			Help:    "Latency of the group committer's store (etcd) transactions, failed ones included.",
			Buckets: []float64{250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
	}
	for k := range runtime.NumTurnKinds {
		m.turns[k] = m.turnDur.WithLabelValues(runtime.TurnKind(k).String())
		m.waits[k] = m.turnWait.WithLabelValues(runtime.TurnKind(k).String())
	}
	return m
}

// actorCalls are the call series of one action of an actor that every
// call uses.
type actorCalls struct {
	durOK, durErr prometheus.Observer
	ok            prometheus.Counter
}

// actionKey names an action of an actor type in byAction.
type actionKey struct{ actor, action string }

func (m *metrics) actorCalls(actor, action string) *actorCalls {
	k := actionKey{actor, action}
	if ac, ok := m.byAction.Load(k); ok {
		return ac.(*actorCalls)
	}
	ac, _ := m.byAction.LoadOrStore(k, &actorCalls{
		durOK:  m.callDur.WithLabelValues(actor, action, "ok"),
		durErr: m.callDur.WithLabelValues(actor, action, "error"),
		ok:     m.calls.WithLabelValues(actor, action, "ok", ""),
	})
	return ac.(*actorCalls)
}

// Turn implements runtime.Observer.
func (m *metrics) Turn(kind runtime.TurnKind, took time.Duration) {
	if int(kind) < len(m.turns) {
		m.turns[kind].Observe(took.Seconds())
	}
}

// TurnWait implements runtime.WaitObserver.
func (m *metrics) TurnWait(kind runtime.TurnKind, waited time.Duration) {
	if int(kind) < len(m.waits) {
		m.waits[kind].Observe(waited.Seconds())
	}
}

// Call implements runtime.Observer (the runtime calls CallAction).
func (m *metrics) Call(actor string, took time.Duration, err error) {
	m.CallAction(actor, "", took, err)
}

// CallAction implements runtime.ActionObserver.
func (m *metrics) CallAction(actor, action string, took time.Duration, err error) {
	ac := m.actorCalls(actor, action)
	if err == nil {
		ac.durOK.Observe(took.Seconds())
		ac.ok.Inc()
		return
	}
	ac.durErr.Observe(took.Seconds())
	m.calls.WithLabelValues(actor, action, callCode(err), callReason(err)).Inc()
}

// StoreCommit implements storage.CommitObserver.
func (m *metrics) StoreCommit(txns, ops int, took time.Duration, _ error) {
	m.batchTxns.Observe(float64(txns))
	m.batchOps.Observe(float64(ops))
	m.commitDur.Observe(took.Seconds())
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.turnDur, m.turnWait, m.callDur, m.calls, m.batchTxns, m.batchOps, m.commitDur}
}

// callCodes names the outcome of a failed call after its kind, so that the
// label takes one value per rivet sentinel (plus context errors), whatever
// codes actors give their own errors.
var callCodes = func() []struct {
	kind error
	code string
} {
	out := []struct {
		kind error
		code string
	}{{context.Canceled, "canceled"}, {context.DeadlineExceeded, "actor.timed_out"}}
	for _, k := range rivet.Kinds() {
		code := "user"
		if k != rivet.ErrUser {
			e := rivet.Errorf(k, "")
			code = e.Group + "." + e.Code
		}
		out = append(out, struct {
			kind error
			code string
		}{k, code})
	}
	return out
}()

// callCode is the rivet_calls_total code of a failed call: its kind's,
// as it always was, so that alerts on code keep their meaning.
func callCode(err error) string {
	for _, c := range callCodes {
		if errors.Is(err, c.kind) {
			return c.code
		}
	}
	return "rivet.internal_error"
}

// callReason is the rivet_calls_total reason of a failed call: the
// group.code its caller gets (storage.no_space, actor.overloaded, which
// code counts as actor.unavailable, a failover's), where it is a pair
// rivet lists, else "". Reasonf keeps only listed pairs and an actor's own
// codes are left out, so the label takes a fixed set of values.
func callReason(err error) string {
	var e *rivet.Error
	if errors.As(err, &e) && e.Kind != rivet.ErrUser && e.Kind != nil {
		if r := rivet.Reasonf(e.Kind, e.Group, e.Code, ""); r.Group == e.Group && r.Code == e.Code && r.Group != "" {
			return r.Group + "." + r.Code
		}
	}
	return ""
}

// collector exposes the node's counters to Prometheus, read at scrape time
// from the runtime and committer (which count with plain atomics, so the
// hot path pays nothing for them), and the histograms of n.metrics.
type collector struct {
	n                                             *Node
	active, tasks, commits, batches, partsOw      *prometheus.Desc
	forwards, fwdFailures, claimed, handedOff     *prometheus.Desc
	renewals, losses, members, unreachable        *prometheus.Desc
	commitFailures, commitRetries                 *prometheus.Desc
	commitStalls, refences                        *prometheus.Desc
	commitWaiting                                 *prometheus.Desc
	queued, sent, received                        *prometheus.Desc
	wfRunning, wfCompleted, wfFailed, wfCancelled *prometheus.Desc
	steps                                         *prometheus.Desc
	shed, callsShed, scheduled, hookFailures      *prometheus.Desc
	unknownFields                                 *prometheus.Desc
	keysEvicted                                   *prometheus.Desc
	subscribers, delivered, dropped               *prometheus.Desc
	etcdAlarms                                    *prometheus.Desc
	portConns, portBound, portFull, readTimeouts  *prometheus.Desc
}

func newCollector(n *Node) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		n:             n,
		active:        d("rivet_active_actors", "Actors in memory on this node."),
		tasks:         d("rivet_actor_tasks_running", "Actors' background functions (ActionCtx.KeepAwake) running on this node; each keeps its actor in memory."),
		shed:          d("rivet_actors_shed_total", "Actors deactivated before their idle timeout because the node held more than --max-active-actors."),
		callsShed:     d("rivet_calls_shed_total", "Client calls (actions, queries, sends) this node refused without running them because --max-waiting-calls turns waited for their actor already (UNAVAILABLE actor.overloaded; clients retry them, and each refusal also counts in rivet_calls_total, with code actor.unavailable and reason actor.overloaded)."),
		keysEvicted:   d("rivet_idempotency_keys_evicted_total", "Idempotency keys actors on this node dropped to keep their last 1024 while the keys were still within their 24 hours, by kind: send or call. A send or call sent again with such a key runs again: a busy actor that needs longer, fewer keys per actor.", "kind"),
		unknownFields: d("rivet_state_unknown_field_loads_total", "Actor loads on this node that found a stored state with fields its type does not declare (a field renamed or removed in the code?): their values were not loaded, and the actor's next change deletes them. By actor type; the node also warns, once a minute per type.", "actor"),
		hookFailures:  d("rivet_actor_hook_failures_total", "Actor lifecycle hooks that failed on this node, by hook: wake (CreateVars or OnWake; the request that woke the actor failed), sleep (OnSleep) or destroy (OnDestroy); the last two are logged and the actor slept or was destroyed all the same.", "hook"),
		scheduled:     d("rivet_scheduled_calls_total", "Scheduled calls (rivet.Scheduler) this node ran, by result: ok, or failed (the action's error, or an action or arguments that no longer fit; the run is not retried, a recurring call's next run comes).", "result"),
		commits:       d("rivet_commits_total", "Transactions committed by the group committer."),
		batches:       d("rivet_commit_batches_total", "Store transactions the group committer sent."),
		partsOw:       d("rivet_partitions_owned", "Partitions this node owns."),

		forwards:    d("rivet_forwards_total", "Requests this node sent to the node owning their actor."),
		fwdFailures: d("rivet_forward_failures_total", "Requests this node sent to the node owning their actor (clients' and its actors') that failed on the way there or back rather than with the owner's answer (an actor's call the node sent again counts once, if its last attempt failed so), by result: not_sent (the owner was not reached: its caller may retry it) or broken (the connection broke once it may have been sent: its outcome is unknown). No node counts them in rivet_calls_total.", "result"),
		claimed:     d("rivet_partitions_claimed_total", "Partitions this node claimed: by its balancer, again with its lease after a loss, and again after a refence (also in rivet_partitions_refenced_total)."),
		handedOff:   d("rivet_partitions_handed_off_total", "Partitions this node handed to another."),
		renewals:    d("rivet_lease_renewals_total", "Renewals of this node's etcd lease."),
		losses:      d("rivet_lease_losses_total", "Times this node lost its lease (and every partition with it)."),
		members:     d("rivet_cluster_members_alive", "Members gossip reports alive, this node included."),
		unreachable: d("rivet_peers_unreachable", "Registered nodes whose gRPC this node has not reached for a few seconds (a network fault between them: requests this node forwards to their partitions fail)."),

		commitFailures: d("rivet_commit_failures_total", "Transactions the group committer failed (fenced, condition failed, too large, store errors)."),
		commitRetries:  d("rivet_commit_retries_total", "Store transactions the group committer sent to split a failed batch."),
		commitStalls:   d("rivet_commit_stalls_total", fmt.Sprintf("Store (etcd) transactions still in flight after %v; the group committer then sent other writers' transactions around them.", storage.DefaultCommitterConfig().StallAfter)),
		commitWaiting:  d("rivet_commit_waiting", "Transactions queued in the group committer, not yet in a batch."),
		refences:       d("rivet_partitions_refenced_total", "Partitions this node released and claimed again because one of their writes had an unknown outcome (an etcd leader change, a timeout)."),

		queued:   d("rivet_queue_messages", "Pending queue messages of the actors in memory on this node, summed."),
		sent:     d("rivet_queue_messages_sent_total", "Messages this node appended to actors' queues, durably."),
		received: d("rivet_queue_messages_received_total", "Queue messages workflows on this node took, durably."),

		wfRunning:   d("rivet_workflows_running", "Workflow runs in memory on this node (working, or waiting in memory for a message or a time), by actor type.", "actor"),
		wfCompleted: d("rivet_workflows_completed_total", "Workflows that completed on this node, by actor type.", "actor"),
		wfFailed:    d("rivet_workflow_failures_total", "Workflows that failed on this node (retries exhausted, a critical error, divergence), by actor type.", "actor"),
		wfCancelled: d("rivet_workflow_cancellations_total", "Workflows an operator cancelled on this node (rivetctl workflow cancel), by actor type.", "actor"),
		steps:       d("rivet_workflow_steps_total", "Workflow step attempts committed on this node, by actor type and status: completed, failed (to be retried), exhausted.", "actor", "status"),

		subscribers: d("rivet_event_subscribers", "Event subscriptions this node holds (of the actors it owns)."),
		delivered:   d("rivet_events_delivered_total", "Events this node handed to subscribers (an event heard by two counts twice)."),
		dropped:     d("rivet_event_subscribers_dropped_total", "Event subscriptions this node ended because more than 1024 events or 8 MiB waited for their subscriber besides the batch being sent to it."),

		portConns:    d("rivet_port_connections", "Connections the node's port holds (accepted, not yet closed), by port: grpc or http.", "port"),
		portBound:    d("rivet_port_connections_limit", "The bound on the connections the node's port holds at once, by port: grpc (half the open files limit, at most 65,536) or http (an eighth, at most 1,024). Past it, new connections wait in the kernel's accept queue.", "port"),
		portFull:     d("rivet_port_full_total", "Times the node's port held its bound of connections (rivet_port_connections_limit), so that accepting the next had to wait for one to close, by port: grpc or http. The node also warns, at most once a minute per port.", "port"),
		readTimeouts: d("rivet_request_read_timeouts_total", "Calls the node dropped (CANCELLED) because their request did not arrive whole within the request read timeout (30 s) of their headers. The node also warns, at most once a minute, with a caller's address."),

		etcdAlarms: d("rivet_etcd_alarms", "etcd's active alarms (its alarm list, any member's), by type: NOSPACE (etcd refuses writes: out of space) or CORRUPT, as this node's etcd client last read them (at most every 5 s, at scrape). Absent while etcd does not answer.", "alarm"),
	}
}

func (c *collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.active, c.tasks, c.shed, c.callsShed, c.commits, c.batches, c.partsOw, c.forwards, c.fwdFailures, c.claimed, c.handedOff, c.renewals, c.losses, c.members, c.unreachable,
		c.commitFailures, c.commitRetries, c.commitStalls, c.refences, c.commitWaiting, c.queued, c.sent, c.received,
		c.wfRunning, c.wfCompleted, c.wfFailed, c.wfCancelled, c.steps, c.scheduled, c.hookFailures, c.unknownFields, c.keysEvicted,
		c.subscribers, c.delivered, c.dropped, c.etcdAlarms,
		c.portConns, c.portBound, c.portFull, c.readTimeouts,
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
	if c.n.metrics != nil {
		for _, m := range c.n.metrics.collectors() {
			m.Describe(ch)
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	// Before the gate: a node that waits at start for an etcd out of
	// space shows it too.
	if alarms, ok := c.n.alarms.get(c.n.alarmCli.Load()); ok {
		for _, t := range []pb.AlarmType{pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT} {
			ch <- prometheus.MustNewConstMetric(c.etcdAlarms, prometheus.GaugeValue, float64(alarms[t]), t.String())
		}
	}
	// Before the gate too: the ports serve, and can fill, while the node
	// starts.
	for _, l := range []*boundedListener{c.n.grpcBound, c.n.httpBound} {
		if l == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.portConns, prometheus.GaugeValue, float64(l.held.Load()), l.port)
		ch <- prometheus.MustNewConstMetric(c.portBound, prometheus.GaugeValue, float64(l.bound), l.port)
		ch <- prometheus.MustNewConstMetric(c.portFull, prometheus.CounterValue, float64(l.full.Load()), l.port)
	}
	ch <- prometheus.MustNewConstMetric(c.readTimeouts, prometheus.CounterValue, float64(c.n.readTimeouts.Load()))
	if !c.n.collecting.Load() {
		return // starting: the parts it reads do not exist yet
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	s := c.n.host.Stats()
	gauge(c.active, s.ActiveActors)
	gauge(c.tasks, s.TasksRunning)
	counter(c.shed, s.ActorsShed)
	counter(c.callsShed, s.CallsShed)
	counter(c.commits, s.Commits)
	counter(c.batches, s.CommitBatches)
	gauge(c.partsOw, uint64(s.PartitionsOwned))
	counter(c.forwards, c.n.view.forwards.Load())
	counter(c.fwdFailures, c.n.view.fwdNotSent.Load(), "not_sent")
	counter(c.fwdFailures, c.n.view.fwdBroken.Load(), "broken")
	counter(c.claimed, c.n.claimed.Load())
	counter(c.handedOff, c.n.handedOff.Load())
	renewals, losses := c.n.own.LeaseStats()
	counter(c.renewals, renewals)
	counter(c.losses, losses)
	alive := 1
	if c.n.gossip != nil {
		alive = len(c.n.gossip.Alive())
	}
	gauge(c.members, uint64(alive))
	gauge(c.unreachable, uint64(len(c.n.view.unreachable(time.Now()))))

	cs := c.n.committer.Stats()
	counter(c.commitFailures, uint64(cs.Failed))
	counter(c.commitRetries, uint64(cs.Retries))
	counter(c.commitStalls, uint64(cs.Stalls))
	gauge(c.commitWaiting, uint64(cs.Waiting))
	counter(c.refences, s.Refences)

	gauge(c.queued, s.QueuedMessages)
	counter(c.sent, s.MessagesSent)
	counter(c.received, s.MessagesReceived)
	// By actor type: each registered type with a workflow has its series
	// from the start (zeros included), so that a rate over them has a
	// first point.
	for actor, w := range c.n.host.WorkflowStatsByType() {
		gauge(c.wfRunning, w.Running, actor)
		counter(c.wfCompleted, w.Completed, actor)
		counter(c.wfFailed, w.Failed, actor)
		counter(c.wfCancelled, w.Cancelled, actor)
		counter(c.steps, w.StepsCompleted, actor, "completed")
		counter(c.steps, w.StepsFailed, actor, "failed")
		counter(c.steps, w.StepsExhausted, actor, "exhausted")
	}
	counter(c.scheduled, s.SchedulesFired, "ok")
	counter(c.scheduled, s.SchedulesFailed, "failed")
	counter(c.keysEvicted, s.SendKeysEvicted, "send")
	counter(c.keysEvicted, s.CallKeysEvicted, "call")
	for actor, n := range c.n.host.UnknownStateFieldLoads() {
		counter(c.unknownFields, n, actor)
	}
	counter(c.hookFailures, s.WakeHooksFailed, "wake")
	counter(c.hookFailures, s.SleepHooksFailed, "sleep")
	counter(c.hookFailures, s.DestroyHooksFailed, "destroy")
	gauge(c.subscribers, s.EventSubscribers)
	counter(c.delivered, s.EventsDelivered)
	counter(c.dropped, s.EventSubscribersDropped)

	if c.n.metrics != nil {
		for _, m := range c.n.metrics.collectors() {
			m.Collect(ch)
		}
	}
}

// embeddedEtcdMetrics is the embedded etcd member's own metrics (etcd_*:
// leader, database size and quota, fsync and commit latencies), which etcd
// registers on the process's default registry. A node serves them beside
// its own when it runs a member, so that one scrape of its HTTP port
// covers the member too: its client port, where etcd serves them, is not
// published by the compose files (and a node with TLS or a token keeps
// it private). The rest of the default registry (the Go and process
// collectors) the node's own registry has already. A node of an external
// etcd serves none: the process holds no member, and etcd's collectors,
// registered all the same, would show a member without a leader.
//
// The default registry's error is dropped: it may come from a collector
// that is not etcd's (whose families are dropped anyway), and returned it
// would fail the node's whole /metrics. The series are the process's: one
// member's, as a node runs at most one (tests may run several).
var embeddedEtcdMetrics = prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
	mfs, _ := prometheus.DefaultGatherer.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "etcd_") {
			out = append(out, mf)
		}
	}
	return out, nil
})

// alarmsEvery bounds how often a scrape asks etcd for its alarms, whatever
// the number of scrapers; alarmsTimeout bounds the asking.
const (
	alarmsEvery   = 5 * time.Second
	alarmsTimeout = time.Second
)

// alarmCache is etcd's alarm list as a scrape last read it. rivet's own
// counters show an out-of-space etcd only as writes are refused: an idle
// cluster's NOSPACE moved none, and a node on an external etcd serves no
// etcd series.
type alarmCache struct {
	mu     sync.Mutex
	at     time.Time
	counts map[pb.AlarmType]int
	ok     bool
}

// get returns the alarms by type, read again from cli if the last read
// is older than alarmsEvery; ok is false if etcd did not answer (or cli
// is nil: the node has no etcd client yet).
func (a *alarmCache) get(cli *clientv3.Client) (map[pb.AlarmType]int, bool) {
	if cli == nil {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.at) < alarmsEvery {
		return a.counts, a.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), alarmsTimeout)
	resp, err := cli.AlarmList(ctx)
	cancel()
	a.at, a.ok, a.counts = time.Now(), err == nil, map[pb.AlarmType]int{}
	if err == nil {
		for _, m := range resp.Alarms {
			a.counts[m.Alarm]++
		}
	}
	return a.counts, a.ok
}
