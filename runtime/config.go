package runtime

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/defaults"
)

// Config tunes a Host. The zero value of a field takes its default (see
// DefaultConfig); validate rejects contradictions.
type Config struct {
	// NodeID names this node in owner claims and logs.
	NodeID string
	// Partitions is the cluster's fixed partition count (from
	// storage.ClusterConfigKey).
	Partitions uint32
	// IdleTimeout is how long an actor stays in memory without a turn before
	// it is deactivated. Its state is durable all along, so this trades
	// memory for the cost of a reload (one etcd range read). 0: 30 s. A
	// negative one is refused (New): it meant the default, without a word,
	// where a Dapr or Orleans user may read "never"; an actor kept in
	// memory is one with a KeepAwake task.
	IdleTimeout time.Duration
	// ActionTimeout ends the context of one action's turn (its wait for
	// the gate included). Default 60 s, as the original. An action that
	// ignores its context runs on until it returns, and what it did
	// stands (its changes commit; its caller gets a timeout error if it
	// changed the state); the node logs a warning of it.
	ActionTimeout time.Duration
	// StepGrace is how long a workflow step body in flight when its actor
	// leaves the node gracefully (a handoff: a drain, a rebalance; a
	// node's stop) may run on to its end, its attempt recorded and
	// committed, before its context is cancelled; no new step starts
	// meanwhile, and the run goes on on the next owner. A body cancelled
	// runs again there, as after a crash: a rolling deploy re-ran every
	// step with a call in flight (a trial's orders charged twice).
	// Default 5 s; negative: none, the body is cancelled at once.
	StepGrace time.Duration
	// ReadGateWait bounds how long Inspect, State, Get and a Subscribe's
	// existence check wait for an actor's turn (a Step body or a slow
	// action holds it, or many calls wait for it) before they read what
	// it committed from storage instead. Default 50 ms.
	ReadGateWait time.Duration
	// MaxActiveActors bounds the actors in memory on this node. Past it,
	// those idle longest (no turn for a second, no sender waiting, a
	// workflow only waiting) are deactivated before their IdleTimeout,
	// down to 90% of the bound, as Akka's active entity limit and Orleans'
	// activation collection do: actors touched once by a burst do not
	// hold memory until their timeout. Their state is durable; the next
	// call loads them again. Actors all busy at once may exceed it.
	// 0: the default, 100,000; negative: no bound.
	MaxActiveActors int
	// MaxStateBytes bounds an actor's state as JSON. A change that would
	// exceed it fails with rivet.ErrTooLarge and is discarded (a hook's,
	// CreateVars' or OnWake's, fails the hook: rivet.ErrInternal, as for
	// any hook failure). Default 1 MiB.
	MaxStateBytes int
	// MaxResultBytes bounds an action's JSON result. Default 4 MiB.
	MaxResultBytes int
	// MaxStepOutputBytes bounds a workflow step's JSON output. An attempt
	// whose output, or whose state, is over its limit fails for good
	// (workflow.FailureCritical) and its changes are discarded: the
	// workflow's code sees the step's error. Default 1 MiB: a step's
	// record goes to etcd in one transaction (1.4 MiB) with the
	// bookkeeping that rides with it, and a larger one would fail the
	// run instead (its commit refused).
	MaxStepOutputBytes int
	// MaxFoldedStateBytes is the largest state a workflow step stores in
	// its own history entry (one key per step; docs/architecture.md, "A
	// step's state rides in its history entry"): a larger one goes to the
	// state key, so that the entries a history keeps (a loop's last
	// iterations, a run's steps) do not each keep a copy of it (a user
	// trial: a 250 KB state, copied into the 40 entries a loop kept, made
	// 11 MB per actor). Default 1 KiB; negative: never in the entry.
	MaxFoldedStateBytes int
	// MaxArgsBytes bounds an action's JSON arguments, of a call an actor
	// makes (a client's call is checked by the node's server, to the same
	// limit). Default 4 MiB.
	MaxArgsBytes int
	// MaxMessageBytes bounds a queue message's JSON body. Default 64 KiB.
	MaxMessageBytes int
	// MaxInputBytes bounds a create's JSON input, of a create an actor
	// makes (rivet.Create; a client's create is checked by the node's
	// server, to the same limit). Default 4 MiB.
	MaxInputBytes int
	// MaxQueueDepth bounds the pending messages of one queue; a Send beyond
	// it fails with rivet.ErrQueueFull. Default 1000.
	MaxQueueDepth int
	// MaxCallDepth bounds how many calls between actors a call chain
	// nests (A calls B, which calls A again...; through any actors): a
	// call past it fails with rivet.ErrInvalidArgument, most likely an
	// actor calling itself without end, which would otherwise go on
	// until its deadline, each level holding a goroutine and its turn's
	// restore point (Dapr's reentrancy stops at 32, configurable).
	// Default 256.
	MaxCallDepth int
	// MaxWaitingCalls is how many turns may wait for one actor's turn
	// gate on this node before a client's call (an action, query or send,
	// forwarded or not) is refused: one that finds that many waiting is
	// refused at once, with rivet.ErrUnavailable (reason
	// actor.overloaded), and did not run (a create it asked for may have
	// happened), so that a flood of calls to one hot actor costs the node
	// a refusal each rather than a goroutine and its arguments held until
	// their deadlines, as Orleans sheds load and Rivet bounds an actor's
	// calls in flight. Clients retry it with backoff (the Go client does).
	// The calls actors make (a step's, an action's, a scheduled call's, a
	// KeepAwake task's) are not refused: that would fail the turn where it
	// waited before, and free nothing, as their caller holds a goroutine
	// all the same. Nor are the actor's own turns (its workflow's, its
	// scheduled calls) nor an operator's; all count among those waiting,
	// and may make the line longer than the bound.
	// Default 1000; negative: no bound.
	MaxWaitingCalls int
	// ExposeErrors sends the message of an action's unexpected (non-rivet)
	// error to the caller. Off, the caller sees "internal error" and the node
	// logs the cause: error text can leak internals (RIVET_EXPOSE_ERRORS=1 in
	// the original engine).
	ExposeErrors bool
	// CheckQueries makes the node check that a read-only action (a
	// rivet.Query) leaves the actor's state as it found it: one that
	// changes it fails (rivet.ErrInternal, reason
	// actor.query_changed_state) and its change is undone. A query's
	// change is otherwise not saved: it stays in memory until the next
	// action's commit writes it with its own, or is lost when the actor
	// leaves memory (a user trial's query set a field, the next call read
	// it, storage never had it). Two encodings of the state a query: for
	// tests and staging (node/nodetest turns it on), not production.
	CheckQueries bool
	// Logger receives the runtime's logs. Default: a no-op logger.
	Logger *zap.Logger
	// Observer receives the durations of turns and calls (for metrics).
	// Default: none.
	Observer Observer
	// TracerProvider, if set, traces actions, workflow step attempts,
	// and the calls and sends actors make (docs/deploy.md, "Tracing"),
	// with its tracer of the instrumentation scope
	// github.com/rivet-go/rivet. Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns the defaults, matching the original engine's.
func DefaultConfig() Config {
	return Config{
		IdleTimeout:         defaults.IdleTimeout,
		ActionTimeout:       60 * time.Second,
		StepGrace:           5 * time.Second,
		ReadGateWait:        50 * time.Millisecond,
		MaxActiveActors:     100_000,
		MaxStateBytes:       defaults.StateBytes,
		MaxResultBytes:      4 << 20,
		MaxStepOutputBytes:  defaults.StepOutputBytes,
		MaxFoldedStateBytes: 1 << 10,
		MaxArgsBytes:        4 << 20,
		MaxMessageBytes:     defaults.MessageBytes,
		MaxInputBytes:       4 << 20,
		MaxQueueDepth:       defaults.QueueDepth,
		MaxCallDepth:        256,
		MaxWaitingCalls:     1000,
	}
}

func (c *Config) validate() error {
	d := DefaultConfig()
	if c.NodeID == "" {
		return errors.New("runtime: Config.NodeID is empty")
	}
	if c.Partitions == 0 {
		return errors.New("runtime: Config.Partitions is 0")
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("runtime: Config.IdleTimeout is negative (%v): give a positive duration, or 0 for the default (%v); no value means never (a KeepAwake task keeps an actor in memory)", c.IdleTimeout, d.IdleTimeout)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.ActionTimeout <= 0 {
		c.ActionTimeout = d.ActionTimeout
	}
	if c.StepGrace == 0 {
		c.StepGrace = d.StepGrace
	}
	if c.ReadGateWait <= 0 {
		c.ReadGateWait = d.ReadGateWait
	}
	if c.MaxActiveActors == 0 {
		c.MaxActiveActors = d.MaxActiveActors
	}
	if c.MaxStateBytes <= 0 {
		c.MaxStateBytes = d.MaxStateBytes
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = d.MaxResultBytes
	}
	if c.MaxStepOutputBytes <= 0 {
		c.MaxStepOutputBytes = d.MaxStepOutputBytes
	}
	if c.MaxFoldedStateBytes == 0 {
		c.MaxFoldedStateBytes = d.MaxFoldedStateBytes
	}
	if c.MaxArgsBytes <= 0 {
		c.MaxArgsBytes = d.MaxArgsBytes
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MaxInputBytes <= 0 {
		c.MaxInputBytes = d.MaxInputBytes
	}
	if c.MaxQueueDepth <= 0 {
		c.MaxQueueDepth = d.MaxQueueDepth
	}
	if c.MaxCallDepth <= 0 {
		c.MaxCallDepth = d.MaxCallDepth
	}
	if c.MaxWaitingCalls == 0 {
		c.MaxWaitingCalls = d.MaxWaitingCalls
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return nil
}
