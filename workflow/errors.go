package workflow

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/rivet-go/rivet/internal/errkind"
	"github.com/rivet-go/rivet/internal/errtext"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrEvicted is returned by every primitive once the host stopped the
	// run (the actor is being deactivated, or its node lost it). Workflow
	// code must return it unchanged: the run resumes from history on the
	// next activation.
	ErrEvicted = errors.New("workflow: evicted")
	// ErrCancelled is returned by the primitives of a race branch that lost.
	// Return it unchanged, like ErrEvicted.
	ErrCancelled = errors.New("workflow: cancelled: race lost")
	// ErrDiverged matches every *DivergenceError.
	ErrDiverged = errors.New("workflow: history diverged")
	// ErrDecode matches every *DecodeError.
	ErrDecode = errors.New("workflow: recorded value does not decode")
	// ErrTimeout matches a Next that timed out, a *StepError of kind
	// FailureTimeout, and a recorded error (*RecordedError) of either,
	// such as a branch's in a *JoinError or *RaceError.
	ErrTimeout = errors.New("workflow: timed out")
	// ErrEntryInProgress: a primitive was called on a Ctx that is already
	// running one (from another goroutine, or the outer Ctx from inside a
	// loop, join, race or try body, which must use the Ctx they are given).
	ErrEntryInProgress = errors.New("workflow: another entry is in progress on this Ctx")
	// ErrRollbackCheckpoint: a step with a rollback handler ran before any
	// RollbackCheckpoint.
	ErrRollbackCheckpoint = errors.New("workflow: a step with a rollback handler needs a RollbackCheckpoint before it")
	// ErrNotCompleted: a receive with NextOptions.Completable was followed by
	// another receive before all its messages were completed. Each thread
	// owes its own: the top level, or one join or race branch. A receive in
	// a branch is not refused for a message the top level owes, nor one at
	// the top level for a message a branch that ended left uncompleted
	// (whose sender then waits until its wait times out).
	ErrNotCompleted = errors.New("workflow: a completable message was not completed before the next receive")
	// ErrInvalid: a bad name (empty, with '/', starting with '~', or not
	// valid UTF-8), a duplicate branch name, a bad option, a loop state
	// that does not marshal to JSON (the first or one an iteration
	// returned), a Break outside a loop (returned by the workflow's
	// function or a branch's), a second Complete of a message in one run,
	// or a Ctx used after the function it was
	// given to returned (kept from a loop iteration, a branch or a try
	// block, or on a goroutine that function started).
	ErrInvalid = errors.New("workflow: invalid use")
	// ErrGoexit matches the *PanicError of workflow code or a step body
	// that called runtime.Goexit (testing's t.FailNow, t.Fatal and
	// t.SkipNow do): the run fails, as after a panic outside steps.
	ErrGoexit = errors.New("workflow: runtime.Goexit called in workflow code")
	// Break ends a Loop or LoopWith when its body returns it. Named after
	// the original's Loop.break, as io.EOF is named for what it means.
	// One that reaches the end of the workflow or of a join or race branch
	// ended no loop: the run fails with ErrInvalid.
	Break = errors.New("workflow: break") //lint:ignore ST1012 it is a signal, not a failure
)

// DivergenceError says that the code no longer does what the history
// records, so replaying it would be wrong. The workflow fails (no rollback
// runs); fix the code, or migrate with GetVersion and Removed.
type DivergenceError struct {
	// Path is the entry (or scope) where the difference shows.
	Path string
	// Expected is what the history holds there.
	Expected string
	// Found is what the code did instead.
	Found string
	// Reused is set when the code used one name twice in a scope (Found
	// then says what used it the second time: "step", "sleep", ...): two
	// entries would share one record. It is a mistake in the code, on a
	// new run as on a replay, that no gate fixes: give each entry a name
	// of its own. Rivet throws HistoryDivergedError for it too.
	Reused bool
	// Gate is the version a gate recorded at Path holds, when the code
	// did not reach that gate where the history has it (a gate's old
	// path, version 1, the code may leave unreached: see History's
	// oldPathGate): mostly code without the gate replays a history that
	// code with it recorded.
	Gate int
}

func (e *DivergenceError) Error() string {
	if e.Reused {
		scope, name := "the workflow's top level", e.Path
		if i := strings.LastIndexByte(e.Path, '/'); i >= 0 {
			scope, name = fmt.Sprintf("scope %q", e.Path[:i]), e.Path[i+1:]
		}
		return fmt.Sprintf("workflow: the name %q is used twice in %s (the second time by a %s): each entry of a scope needs a name of its own (in a Go loop, put the index in the name, or use Ctx.Loop, whose iterations are scopes of their own)", name, scope, e.Found)
	}
	if e.Gate != 0 {
		// Adding a gate cannot be the cause: the history has it. Code
		// without it replays a history that code with it recorded.
		return fmt.Sprintf("workflow: history diverged at %q: history has %s, code did %s: code that reached that version gate here (and took version %d) recorded this history, and this code does not reach it: an older build (a deploy rolled back, or a node not upgraded yet in a rolling upgrade: run the build with the gate on every node, then retry the workflow), or the gate was moved or dropped while runs that took it are in flight (keep it where it was, or put Ctx.Removed(name, KindVersionCheck) there once none is left)", e.Path, e.Expected, e.Found, e.Gate)
	}
	// The hint is for the operator who reads this in rivetctl inspect or
	// actors --failed, often after a deploy, and knows Temporal's
	// nondeterminism error: what makes such a change replay.
	return fmt.Sprintf("workflow: history diverged at %q: history has %s, code did %s (code changed under a run in flight needs a gate: Ctx.GetVersion, or Ctx.Removed for what it no longer does)", e.Path, e.Expected, e.Found)
}

// Is makes errors.Is(err, ErrDiverged) true.
func (e *DivergenceError) Is(target error) bool { return target == ErrDiverged }

// DecodeError says that a value the history holds (a step's, a loop's
// state or result, a join branch's, a race winner's) does not decode into
// the type the code reads it into. Its type, or its UnmarshalJSON, changed
// since it was recorded, or the type does not read what its MarshalJSON
// writes (a step's value is checked when it is recorded, so that a step
// fails then instead: see Step). The code reached the entry as recorded,
// so it is not a *DivergenceError; but as after one, the workflow fails
// (no rollback runs, no Try catches it): make the type read the recorded
// value again, or gate the change with GetVersion.
type DecodeError struct {
	// Path is the entry (a loop's iteration, for its state; a branch's
	// path, for a join branch's or a race winner's value).
	Path string
	// Type is the Go type the code reads the value into.
	Type string
	// Value is the recorded JSON, cut to 80 bytes.
	Value string
	// Err is json.Unmarshal's error.
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("workflow: the value recorded at %q does not decode into %s: %v (recorded: %s)", e.Path, e.Type, e.Err, e.Value)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrDecode) true.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// RecordedError is an error as the history stores it: its message, its
// code if the original implemented ErrorCode() string, the kind of error
// of the rivet package it matched, and whether it matched ErrTimeout.
// Steps, joins and races return errors in this form both live and on
// replay, so that code that inspects them behaves the same both times.
//
// It matches with errors.Is the rivet kind its original matched: a step
// whose body called an action the other actor does not have fails with an
// error that matches rivet.ErrUnknownAction, as the call's did; a
// rivet.UserError's matches rivet.ErrUser (its own code is ErrorCode's).
// The kind is the one the original matched when it was recorded (the
// first, in rivet.Kinds() order), kept by its stable name: a reason's
// *rivet.Error matches its kind, and so do a *rivet.Error whose (group,
// code) this build does not list (a newer node's answer, which the client
// decodes by its status code), an error of a type of its own that wraps a
// rivet sentinel, and a bare one, wrapped or not. It matches no rivet
// kind if its original matched none (an error type of its own that wraps
// nothing of rivet's, whatever its code), nor if recorded by a build that
// did not keep the kind (compare ErrorCode). It is not a *rivet.Error
// (errors.As finds none), so rivet.OutcomeUnknown says of it only what
// errors.Is can: true if it matched rivet.ErrTimeout; false for an
// unavailable that no node said (a connection that broke mid-call), for
// which it says true of the original.
type RecordedError struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
	// RivetKind names the rivet kind the original matched
	// ("actor.not_found": its stable group and code on the wire, see
	// package errkind), "" for none; not a FailureKind, whose entries
	// and errors name theirs Kind. Absent from entries recorded before it
	// was kept: those match no kind, as they did then.
	RivetKind string `json:"rivet_kind,omitempty"`
	// Timeout keeps errors.Is(err, ErrTimeout) of the original (a branch
	// whose step timed out, or whose Next got nothing in time), which a
	// fallback around a join or race tests. Absent from entries recorded
	// before it was kept: those read as not a timeout, as they did then.
	Timeout bool `json:"timeout,omitempty"`
}

func (e *RecordedError) Error() string { return e.Message }

// message is e's Message, "" for a nil e.
func (e *RecordedError) message() string {
	if e == nil {
		return ""
	}
	return e.Message
}

// ErrorCode returns the recorded code ("" if none).
func (e *RecordedError) ErrorCode() string { return e.Code }

// Is makes an error recorded from one that matched ErrTimeout match it,
// and one recorded from an error that matched a rivet kind match that
// kind: by the name recorded, not by what this build makes of the code,
// so that an entry matches the same kinds in every build that replays it.
func (e *RecordedError) Is(target error) bool {
	if target == ErrTimeout {
		return e.Timeout
	}
	return errkind.Is(e.RivetKind, target)
}

// tame returns err, the workflow code's own (its function's, a branch's,
// a try block's, a loop body's, a step body's, a rollback handler's), as
// the engine may inspect it: if its methods panic when the engine reads
// it (a nil *T returned as the error, whose Error, Unwrap, Is or As reads
// its receiver), a plain error with what it says instead. Tamed where it
// enters the engine, once, so that none of the engine's classifications
// (errors.Is, errors.As, Error) panics on it: on the workflow's goroutine
// that would take the node down, and every node that took the workflow
// over after it.
func tame(err error) error {
	if err == nil {
		return nil
	}
	safe := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		_ = err.Error()
		var pe *PanicError
		_ = errors.As(err, &pe)        // every Unwrap and As of its chain
		_ = errors.Is(err, ErrEvicted) // and every Is
		return true
	}()
	if safe {
		return err
	}
	return errors.New(errtext.Of(err))
}

// record converts err to the form the history keeps. err's methods are
// the workflow code's own, and may panic (a typed nil): the attempt is
// recorded as failed all the same, as with any error, never left to panic
// in the turn that records it, which would run it again without end.
func record(err error) *RecordedError {
	if err == nil {
		return nil
	}
	r := &RecordedError{Message: capMessage(errtext.Of(err))}
	func() {
		defer func() { _ = recover() }() // an Is, Unwrap or ErrorCode that panics: no code, not a timeout
		r.Timeout = errors.Is(err, ErrTimeout)
		var c interface{ ErrorCode() string }
		if errors.As(err, &c) {
			r.Code = c.ErrorCode()
		}
		r.RivetKind = errkind.Of(err)
	}()
	return r
}

// MaxErrorBytes bounds an error's message as the history records it: the
// rest is cut. An error is the one thing of a step's record that no limit
// of its host bounds, and a record too large to commit fails the run.
const MaxErrorBytes = 16 << 10

// capMessage cuts msg to MaxErrorBytes, at a rune's start, saying so.
func capMessage(msg string) string {
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... [%d bytes more not recorded]", msg[:cut], len(msg)-cut)
}

// FailureKind says why a step failed for good. Stored.
type FailureKind string

// The failure kinds, as in the original engine.
const (
	// FailureCritical: the step returned a Critical error, or the error of
	// a workflow primitive its body misused (ErrEntryInProgress,
	// ErrInvalid: nested steps are not a thing) or Break (which ends
	// loops); no retry.
	FailureCritical FailureKind = "critical"
	// FailureTimeout: the step timed out and RetryOnTimeout was not set.
	FailureTimeout FailureKind = "timeout"
	// FailureExhausted: every attempt failed.
	FailureExhausted FailureKind = "exhausted"
	// FailureRollback: the step returned a Rollback error: no retry, and
	// TryStep and Try let it through so that the workflow rolls back.
	FailureRollback FailureKind = "rollback"
)

// StepError is the error of a step that failed for good.
type StepError struct {
	Path     string
	Kind     FailureKind
	Attempts int
	// Err is the last attempt's error as recorded (a *RecordedError).
	Err error
}

func (e *StepError) Error() string {
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("workflow: step %q failed (%s, %d %s): %v", e.Path, e.Kind, e.Attempts, attempts, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Is makes a timed-out step match ErrTimeout.
func (e *StepError) Is(target error) bool { return target == ErrTimeout && e.Kind == FailureTimeout }

// CriticalError marks an error as not worth retrying. Make one with Critical.
type CriticalError struct{ Err error }

// Critical returns err marked critical: the step that returns it fails at
// once with kind FailureCritical, without retries.
func Critical(err error) error { return &CriticalError{Err: err} }

func (e *CriticalError) Error() string { return e.Err.Error() }
func (e *CriticalError) Unwrap() error { return e.Err }

// RollbackError asks for the workflow to fail and roll back. Make one with
// Rollback.
type RollbackError struct{ Err error }

// Rollback returns err marked so that its step fails at once with kind
// FailureRollback, which TryStep and Try do not catch: the workflow fails
// and its rollback handlers run.
func Rollback(err error) error { return &RollbackError{Err: err} }

func (e *RollbackError) Error() string { return e.Err.Error() }
func (e *RollbackError) Unwrap() error { return e.Err }

// JoinError is the error of a join with failed branches. The branches that
// succeeded are recorded too, but their values are not returned.
type JoinError struct {
	Path string
	// Errors holds each failed branch's error as recorded, by branch name.
	Errors map[string]error
}

func (e *JoinError) Error() string {
	names := make([]string, 0, len(e.Errors))
	for n := range e.Errors {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "workflow: join %q: %d branch(es) failed:", e.Path, len(names))
	for _, n := range names {
		fmt.Fprintf(&b, " %s: %v;", n, e.Errors[n])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns the branch errors, ordered by branch name.
func (e *JoinError) Unwrap() []error {
	names := make([]string, 0, len(e.Errors))
	for n := range e.Errors {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]error, len(names))
	for i, n := range names {
		out[i] = e.Errors[n]
	}
	return out
}

// BranchLimitError is the error of a new join or race whose branches are
// too many for its record (their names with their statuses over
// MaxBranchBytes), returned as it opens, before any branch runs: fan out
// in batches instead (a Loop whose iterations each join a few thousand).
// It matches ErrInvalid, which fails the run.
type BranchLimitError struct {
	Path     string
	Kind     Kind
	Branches int // how many the code gave
	Bytes    int // their record's size
	Limit    int // MaxBranchBytes
}

func (e *BranchLimitError) Error() string {
	return fmt.Sprintf("workflow: %s %q has %d branches, too many for its record (%d bytes of names and statuses; at most %d, about %d branches of these names): fan out in batches of fewer (a Loop of joins)",
		e.Kind, e.Path, e.Branches, e.Bytes, e.Limit, int(int64(e.Branches)*int64(e.Limit)/int64(max(e.Bytes, 1))))
}

func (e *BranchLimitError) Unwrap() error { return ErrInvalid }

// BranchError is one failed race branch.
type BranchError struct {
	Name string
	Err  error
}

// RaceError is the error of a race whose every branch failed.
type RaceError struct {
	Path string
	// Errors holds each branch's error as recorded, in declaration order.
	Errors []BranchError
}

func (e *RaceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workflow: race %q: every branch failed:", e.Path)
	for _, be := range e.Errors {
		fmt.Fprintf(&b, " %s: %v;", be.Name, be.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns the branch errors.
func (e *RaceError) Unwrap() []error {
	out := make([]error, len(e.Errors))
	for i, be := range e.Errors {
		out[i] = be.Err
	}
	return out
}

// ErrRollbackNotReplayed is the cause of a RollbackFailedError for a step
// whose rollback handler the run never registered: after a restart, the
// scope that holds it was not replayed (a completed loop, a loop iteration
// before the loop's last checkpoint, or a settled join or race branch
// whose code changed since), so its handler is unknown. The step's
// compensation has to be done by hand.
var ErrRollbackNotReplayed = errors.New("its rollback handler was not registered: the scope holding the step completed before the workflow restarted and is not replayed")

// ErrRollbackRemoved is the cause of a RollbackFailedError for a step
// whose code is gone: the workflow's code retired it (or a scope holding
// it) with Removed, and its rollback handler with it. The step's
// compensation has to be done by hand, or its handler kept in the code
// until no workflow that ran the step can roll back.
var ErrRollbackRemoved = errors.New("its rollback handler was removed from the code with its step (Removed)")

// RollbackFailedError is a rollback handler's failure. The workflow fails
// with it joined to the error that started the rollback.
type RollbackFailedError struct {
	Path string
	Err  error
}

func (e *RollbackFailedError) Error() string {
	return fmt.Sprintf("workflow: rollback of step %q failed: %v", e.Path, e.Err)
}

func (e *RollbackFailedError) Unwrap() error { return e.Err }

// PanicError is a panic in workflow code outside steps, turned into a
// failure of the workflow, which rolls back as after an error the code
// returned. A panic in a join or race branch fails the whole workflow (no
// branch records it, no Try catches it). (A panic inside a step is a
// failed attempt.) A runtime.Goexit in workflow code, a step body
// included, is one too (errors.Is ErrGoexit): the goroutine it ends cannot
// go on.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("workflow: panic: %v", e.Value) }

// Is makes errors.Is(err, ErrGoexit) true for a runtime.Goexit.
func (e *PanicError) Is(target error) bool {
	_, ok := e.Value.(goexit)
	return ok && target == ErrGoexit
}

// goexit is the Value of the *PanicError of a runtime.Goexit.
type goexit struct{ in string }

func (g goexit) String() string {
	where := ""
	if g.in != "" {
		where = " in the body of " + g.in
	}
	return "runtime.Goexit called" + where + " (t.FailNow and t.Fatal call it): workflow code and step bodies must return instead"
}

// Source says what a Try caught.
type Source string

// The sources of a caught failure.
const (
	SourceStep Source = "step"
	SourceJoin Source = "join"
	SourceRace Source = "race"
	// SourceBlock: a Rollback error returned by a Try block's own code
	// (caught only with CatchRollback).
	SourceBlock Source = "block"
)

// Failure is a terminal failure that TryStep or Try caught.
type Failure struct {
	Source Source
	// Kind is why a step failed; empty for joins and races.
	Kind FailureKind
	// Name is the path of the step, join or race that failed.
	Name     string
	Attempts int
	// Err is the *StepError, *JoinError or *RaceError.
	Err error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// stepFailure is a step's terminal failure as Try and TryStep report it.
func stepFailure(se *StepError) *Failure {
	return &Failure{Source: SourceStep, Kind: se.Kind, Name: se.Path, Attempts: se.Attempts, Err: se}
}

// isControl reports whether err stops the workflow rather than fails part
// of it: such errors are never recorded as a branch's failure, never caught
// by Try, and never start a rollback, except a panic, which fails the
// workflow as an error it returns would (Run's finish).
func isControl(err error) bool {
	if errors.Is(err, ErrEvicted) || errors.Is(err, ErrCancelled) || errors.Is(err, ErrDiverged) || errors.Is(err, ErrDecode) ||
		errors.Is(err, ErrEntryInProgress) || errors.Is(err, ErrRollbackCheckpoint) ||
		errors.Is(err, ErrNotCompleted) || errors.Is(err, ErrInvalid) {
		return true
	}
	var pe *PanicError
	return errors.As(err, &pe)
}

// size is about what e adds to its entry (payloadBytes).
func (e *RecordedError) size() int {
	if e == nil {
		return 0
	}
	return len(e.Message) + len(e.Code) + len(e.RivetKind)
}
