// Package workflowtest runs workflows in tests without a cluster: Host is an
// in-memory actor (state, history, queues) that implements workflow.Host per
// activation, with a fake Clock, injected crashes at any commit, and Drive,
// a deterministic simulation loop that jumps time forward whenever the
// workflow is blocked; FakeClient stands in for the other actors a
// workflow calls, sends to and creates (Host.Client; rivet.Create and
// CreateWith), answering as the test says and as a node answers what the
// test did not register (an unknown actor or action, a Get of an actor
// that does not exist, a create of one that does), and recording every
// call for the test to check; and Replay, which checks changed code
// against a history exported from a node (workflow.HistoryExport) before
// deploying it, running nothing.
//
// Host does what a node does where a test can see it, so that a workflow
// that passes here behaves as it would on a node, but for the differences
// listed below:
//
//   - A step attempt that a crash cuts short counts as on a node
//     (workflow.AttemptMarker, the node's attempt markers): a crash in a
//     step's body (Host.Crash, called from the body) or at the commit of
//     its record (CrashAt before it) is recorded by the next run as a
//     failed attempt (workflow.AbandonedAttemptMessage), exhausted if it
//     was the step's last, and StepCtx.Attempt of the next is one more, if
//     the run marked that body (the first body of a run, also the first
//     after a wait long enough for a node to unload the workflow, and the
//     Do bodies beside it: a crash in a later body goes uncounted, as on a
//     node). A run Drive ends because it waits for messages only, which a
//     later Drive (or Drive itself, once they are queued) runs again, is a
//     new run, as after a node's idle unload: the first body after the
//     receive is marked. Such a crash so spends one of the step's retries
//     and waits out its backoff: a step with NoRetries whose first record
//     is lost (CrashAt(n, false)) ends exhausted, and fails a workflow
//     that, before hosts kept markers, completed. A body cut off by an
//     eviction (the run's ctx cancelled) is the host's graceful stop, and
//     is not counted. attempts.go states the rules.
//   - StepCtx.Enqueue queues a message on the actor's own queue with the
//     commit of the attempt's record, checked at the call as a node
//     checks it (the queue declared, its type, the size, 32 messages and
//     256 KiB an attempt, the queue's depth): a commit that crashes
//     (CrashAt) or fails (FailCommit) queues nothing, and a step replayed
//     from its history does not enqueue again.
//   - The limits of a node apply to a step's state, output and messages
//     (MaxStateBytes, MaxStepOutputBytes, MaxMessageBytes, MaxQueueDepth),
//     and its events (StepCtx.Broadcast) are published once its commit
//     applies (Host.Events). A StepCtx kept past its attempt fails to
//     Broadcast or Enqueue (ErrInternal), as on a node.
//
// Known differences from a node: the clock stands still while code runs
// (a step's Timeout fires only when the test moves it, Host.Hang), so
// steps end at the same instant and ties between a join's branches are
// common; an ephemeral step is committed with the next commit, not at
// once (but for one that enqueues); Host.Send is not bounded by
// MaxMessageBytes or MaxQueueDepth; Drive unloads a run that waits on the
// clock only if DriveOptions.Evict says so (a wait a node unloads the
// workflow for only restarts the marking, see Host.IdleTimeout), and
// always one that waits for messages only, at once where a node waits
// IdleTimeout for them; and there are no scheduled calls
// (StepCtx.Schedule fails) nor the actor's actions: test those with
// node/nodetest; and the host knows the actor's queues only if the test
// sets Host.Queues or QueueTypes: without them, a receive from a misspelt
// queue (NextOptions.Names) waits where a node refuses it (ErrInvalid).
// FakeClient stands in for other actors.
//
// Messages are stamped (CreatedAt) with the Clock's time as they are sent,
// and keep it when put back in their queue (a race's loser gives back what
// it took). A message stamped exactly at a receive's deadline came too
// late for it: with the clock stopped at the deadline D, a message sent
// then does not reach the receive, which times out and leaves it queued,
// as a node's look at D that missed it would have (workflow.MessagePeeker).
package workflowtest
