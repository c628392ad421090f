package runtime

import "time"

// TurnKind is what a turn of an actor ran, for Observer. The set is small
// and fixed, so that a metric labelled by it stays small.
type TurnKind uint8

// The kinds of turn.
const (
	// TurnAction: an action (Call).
	TurnAction TurnKind = iota
	// TurnSend: a message appended to a queue (Send).
	TurnSend
	// TurnStep: a workflow step's body and its state.
	TurnStep
	// TurnReceive: a workflow taking queue messages.
	TurnReceive
	// TurnAdmin: Destroy, a workflow retry or cancel, or an operator's
	// cancel of a scheduled call (CancelScheduledCall).
	TurnAdmin

	// NumTurnKinds is the number of kinds, for tables indexed by kind.
	NumTurnKinds = int(TurnAdmin) + 1
)

var turnKindNames = [NumTurnKinds]string{"action", "send", "step", "receive", "admin"}

func (k TurnKind) String() string {
	if int(k) < NumTurnKinds {
		return turnKindNames[k]
	}
	return "unknown"
}

// Observer is told of the Host's measurements that are distributions (the
// Host counts everything else with atomics: Stats). The node adapts it to
// Prometheus histograms.
//
// Its methods run on the hot path, once per turn or call (never per key or
// message), on the goroutine that ran it, with no Host lock held: they must
// be cheap, must not block and must be safe for concurrent use.
type Observer interface {
	// Turn reports how long one turn ran while holding the actor's gate:
	// the action's, step's or receive's code and the building of its
	// writes, not the wait for the gate nor the commit. A send's or a
	// query's turn may run beside a step's body (they do not wait for the
	// step), so an actor's turns may add up to more than the time they
	// took.
	Turn(kind TurnKind, took time.Duration)
	// Call reports one action call from after it was admitted until its
	// reply was ready (its writes durable), and how it ended: nil, or an
	// error that wraps a rivet sentinel or a context error. actor is the
	// actor's registered name, or "" if the call named no registered
	// actor (so that bad input cannot make up label values).
	Call(actor string, took time.Duration, err error)
}

// WaitObserver is an Observer that is also told how long each turn waited
// for its actor's gate (the turns before it, in arrival order): the
// contention on one actor, which Turn's durations do not show. Checked
// once, when the Host is made.
type WaitObserver interface {
	TurnWait(kind TurnKind, waited time.Duration)
}

// ActionObserver is an Observer that is also told which action each call
// ran: CallAction is called instead of Call, with action the registered
// action's name, or "" if the call named none of the actor's (so that bad
// input cannot make up label values). Checked once, when the Host is made.
type ActionObserver interface {
	CallAction(actor, action string, took time.Duration, err error)
}

// waitStart is when a turn began to wait for the gate, if the Observer
// wants the wait (zero otherwise: no clock read).
func (h *Host) waitStart() time.Time {
	if h.waitObs == nil {
		return time.Time{}
	}
	return time.Now()
}

// observeWait reports a turn's wait for the gate since t0 (waitStart),
// whether it got the gate or gave up: the longest waits are those.
func (h *Host) observeWait(kind TurnKind, t0 time.Time) {
	if h.waitObs != nil && !t0.IsZero() {
		h.waitObs.TurnWait(kind, time.Since(t0))
	}
}

// nopObserver is the Observer of a Host configured without one.
type nopObserver struct{}

func (nopObserver) Turn(TurnKind, time.Duration)      {}
func (nopObserver) Call(string, time.Duration, error) {}
