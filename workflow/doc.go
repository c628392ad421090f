// Package workflow is the durable workflow engine of rivet actors: an
// actor's Run function, written as ordinary Go, whose every step, sleep,
// queue receive, loop, join and race is recorded in a history, so that after
// a crash or a deactivation the function is re-run and continues exactly
// where it stopped.
//
//	Run: func(ctx *workflow.Ctx[ReminderState]) error {
//		return ctx.Loop("reminder-loop", func(ctx *workflow.Ctx[ReminderState]) error {
//			msg, err := workflow.Next[Reminder](ctx, "wait-reminder")
//			if err != nil {
//				return err
//			}
//			at := time.UnixMilli(max(ctx.Now().UnixMilli(), msg.Body.At))
//			if err := ctx.SleepUntil("wait-until-reminder", at); err != nil {
//				return err
//			}
//			return ctx.Step("record-reminder", func(s *workflow.StepCtx[ReminderState]) error {
//				s.State.Fired = append(s.State.Fired, msg.Body.Text)
//				return nil
//			})
//		})
//	},
//
// Typed operations are functions (Step, StepOpts, TryStep, Do, LoopWith,
// Next, NextBatch, Join, Race), because Go methods cannot have type
// parameters; the others are methods of Ctx. The orchestration code gets a
// *Ctx, which has no access to the actor's state: only step bodies
// (*StepCtx) do, so every change of state is recorded with the step that
// made it. A Do step's body (*DoCtx) has no state either, so the host runs
// it outside the actor's turn: Do steps of join branches run in parallel.
//
// # Execution model
//
// Every activation re-runs the workflow function from the start (Run). Each
// primitive looks its entry up in the history by its name path ("loop/~3/
// step", "join/branch/step"):
//
//   - a completed entry returns its recorded result at once, without running
//     anything (a step body, a receive, a sleep);
//   - a new or unfinished entry runs live: a step body runs in the actor's
//     turn and its result commits atomically with the state it changed; a
//     receive takes messages and records them in one commit; a sleep records
//     its deadline once and waits.
//
// While the run waits (a sleep, a receive, a retry's backoff) it blocks in
// memory. When every part of it is blocked the host is told (Host.Waiting),
// and may evict it by cancelling its context: every primitive then returns
// ErrEvicted, and Run returns an Outcome with status RunYielded and the time
// and queues that would wake it. The host persists a wakeup and runs the
// workflow again then. Run also returns RunCompleted, or RunFailed with the
// error: a step that used up its retries (*StepError), a join or race that
// failed (*JoinError, *RaceError), the function's own error, a
// divergence (*DivergenceError), or a recorded value the code cannot read
// (*DecodeError). A failed workflow fails the same way when run again: the
// failure is in its history.
//
// Join and race branches run concurrently, on goroutines that Run owns and
// joins before it returns; a race cancels its losers through their context
// and deletes their history; a step that times out has its context
// cancelled. The workflow's function, each branch's and the rollback
// handlers run on a goroutine of their own that Run waits for, so that a
// runtime.Goexit in them (t.FailNow in a test) fails the run with a
// *PanicError (errors.Is ErrGoexit) instead of ending the engine's
// goroutine. Run starts no other goroutine, and none outlives it.
//
// # Rules for workflow code
//
// The engine replays by re-running your code, so the code outside steps must
// take the same path every time it runs against the same history:
//
//  1. Code outside steps must be deterministic. Anything that can differ
//     between runs (the time, random numbers, I/O, calls to other actors,
//     reading the environment) goes in a step, whose result is recorded.
//  2. Use ctx.Now, never time.Now, outside steps: it returns the time
//     recorded by the last entry the code passed, the same on every replay.
//     (Before the first entry that records a time, it is when the workflow
//     started, recorded with its top-level entries.) The
//     actor's key and type name (ctx.Key, ctx.Name, and StepCtx's and
//     DoCtx's, as rivet.ActionCtx's) never change: read them anywhere,
//     they record nothing (Temporal's GetInfo(ctx).WorkflowExecution.ID).
//  3. Do not depend on map iteration order, or on goroutine scheduling: do
//     not start goroutines in workflow code; use Join and Race, and do not
//     make one branch wait for another outside the engine's calls (a Go
//     channel or lock between branches): a branch behind in workflow time
//     holds its race's decision, and a receive of a sibling, until it
//     catches up, so a sibling it waits for may wait for it. A Ctx is
//     valid only in the function it is given to: a primitive called on it
//     after that function returned fails the run with ErrInvalid, and so
//     does one still running then (called from a goroutine), which
//     records nothing from then on (a step's attempt in progress is
//     dropped, its change to the state with it) and returns ErrInvalid:
//     Run stops it and waits for it, so nothing is written after the
//     run's outcome.
//  4. Propagate ErrEvicted (and ErrCancelled, in race branches): return it
//     unchanged. A primitive that returned it will return it again; code that
//     swallows it cannot make progress, and nothing it does is committed.
//  5. Touch the actor's state only in step bodies, through StepCtx.State, and
//     do not keep the pointer after the body returns. Step values and loop
//     states must round-trip through JSON: the engine returns the decoded
//     value even live, so that live runs and replays see the same value.
//     A step value that does not marshal, or does not decode back into its
//     type (a MarshalJSON writing what its UnmarshalJSON rejects), fails
//     its step at once as critical (*StepError naming the type) when the
//     step first runs: the history never holds a completed step that no
//     replay can read. (Temporal decodes an activity's result only when
//     the workflow reads it, and hands the decode error to the workflow
//     code; here the value is read back where it is made, so the failure
//     is the step's, which a TryStep can catch.) Join and race branch
//     values are checked the same way when the branch returns: one that
//     does not marshal or decode back fails its branch (the *JoinError or
//     *RaceError names it and the type; a race's other branches may still
//     win), and a loop state, the first one or one an iteration returns,
//     fails the run with ErrInvalid naming the loop and the iteration, as
//     one that does not marshal does: no join, race or loop is recorded
//     with a value no replay reads. A value recorded that the code can
//     no longer read, because its type or its UnmarshalJSON changed
//     since, fails the run with a *DecodeError (errors.Is ErrDecode)
//     naming the path and the type: not a *DivergenceError, since the
//     code reached the entries the history holds.
//  6. Give every entry a name unique in its scope (a loop iteration, a join
//     or race branch, a try block, or the top level) and keep names stable:
//     entries are found by name. Names are valid UTF-8, 1 to 255 bytes,
//     and may not contain '/' or start with '~'. A name used twice in one
//     scope fails the run, a new one as a replay, with a *DivergenceError
//     whose Reused is set and whose message says the name is used twice
//     where (steps in a Go loop need the index in their names; a Loop's
//     iterations are scopes of their own).
//  7. A loop resumes at its recorded iteration; keep what one iteration
//     passes to the next in LoopWith's state, not in variables captured by
//     the closure.
//  8. Changing the code of running workflows: a change that makes a run
//     reach entries in a different order or under different names is caught
//     as a *DivergenceError naming the path, what the history holds and what
//     the code did (a wrong kind; entries reached in another order than
//     recorded, a try block among them: it records no entry of its own,
//     but its entries record its place in the scope that holds it, so a
//     block moved past entries recorded there diverges too, except in a
//     block first recorded by a build before that; a new entry where
//     recorded ones were not reached yet; a
//     scope, the top level included, that ends with recorded entries it
//     never reached; a workflow that fails with an error of its own before
//     reaching recorded entries, which then runs no compensation; a join
//     or race branch added or removed). Gate changes with GetVersion and retire entries with Removed,
//     put where the entry was. A gate that recorded its old path (1) may go
//     unreached: code from before the gate, which does what that path
//     does, replays it (a deploy rolled back, a node not yet upgraded). What a replay does not run is not checked:
//     a settled join or race, and a completed loop, return their recorded
//     results without running their code again (a loop in progress resumes
//     at its last checkpoint's iteration; a join or race in progress holds
//     the recorded failure of a branch that failed while others went on), so
//     a change inside them (a renamed step) goes unnoticed there, and only
//     takes effect in runs that reach them fresh. To check a change before
//     deploying it against the runs in flight, export their histories
//     (HistoryExport) and replay it with workflowtest.Replay.
//  9. Step bodies may run more than once (at-least-once): after a crash
//     between running and committing, or after a failed attempt. Their state
//     changes commit exactly once per recorded attempt, and a failed
//     attempt's changes are kept (roll-forward); write steps so that a
//     re-run is harmless. Rollback handlers too: they are retried as
//     their steps are.
//  10. Errors returned by steps, branches and receives are recorded as their
//     message, code (ErrorCode() string), the rivet package's kind they
//     matched, and whether they matched ErrTimeout, and come back as a
//     *RecordedError, live as on replay: test them with errors.Is,
//     against ErrTimeout or the rivet package's kinds (a step whose body
//     called an action the other actor lacks fails with an error that
//     matches rivet.ErrUnknownAction; a rivet.UserError's matches
//     rivet.ErrUser), or by code (a user error's own), not by type
//     (errors.As to *rivet.Error finds nothing). An error of a type of
//     your own matches a rivet kind only if it wraps one: one that wraps
//     nothing of rivet's matches none, whatever its code. Entries
//     recorded by a build that did not keep the kind match no rivet kind:
//     test those by code.
//
// # The host's duties
//
// The host (the actor runtime) implements Host. For each activation it:
//
//  1. Loads the actor's committed state and history, and calls Run with a
//     context it cancels to evict the run.
//  2. Runs step bodies in the actor's turn (RunStep) and commits, in ONE
//     atomic write, the state the body left and the history writes it
//     returns. A failed attempt's writes are committed too.
//  3. Commits history-only writes atomically and in order (Commit), which
//     is also how a Do step's record commits; Do bodies call actors through
//     Client, outside any turn.
//  4. Takes queue messages only through Receive, deleting them in the same
//     atomic write that records them, and signals new messages through
//     MessageNotify. A message's CreatedAt is taken as it first becomes
//     visible to Queued and Receive, not before, and kept when a race's
//     loser puts it back (MessagePeeker).
//  5. Commits a completion (Complete) before it answers the sender.
//  6. Fences every write: a host that lost the actor must not commit, and
//     returns an error wrapping ErrEvicted so that the run stops without
//     failing. Any other error fails the workflow.
//  7. Treats Waiting as a hint: it may evict a run blocked longer than it
//     wants to keep the actor in memory.
//  8. After Run returns, acts on the Outcome: RunYielded, persist a wakeup
//     for Outcome.Wake (a time, or a message on one of its queues) and run
//     again then; RunCompleted, the workflow is done; RunFailed, record the
//     failure (status and error) where operators see it, and do not run it
//     again until an operator asks.
//
// The replay core (History and the decision functions beside it) does no
// I/O, starts no goroutine and reads no clock (the driver passes it the
// time), so it is tested directly; the driver around it is tested with the
// in-memory host and fake clock of package workflowtest, including a
// simulation that crashes a workflow at every one of its commits.
package workflow
