// Package workflowtest runs workflows in tests without a cluster: Host is an
// in-memory actor (state, history, queues) that implements workflow.Host per
// activation, with a fake Clock, injected crashes at any commit, and Drive,
// a deterministic simulation loop that jumps time forward whenever the
// workflow is blocked; FakeClient stands in for the other actors a
// workflow calls and sends to (Host.Client), answering as the test says
// and as a node answers what the test did not register (an unknown actor
// or action, a Get of an actor that does not exist), and recording every
// call for the test to check; and Replay, which checks changed code
// against a history exported from a node (workflow.HistoryExport) before
// deploying it, running nothing.
//
// Host does what a node does where a test can see it, so that a workflow
// that passes here behaves the same on a node:
//
//   - A step attempt that a crash cuts short counts as on a node
//     (workflow.AttemptMarker, the node's attempt markers): a crash in a
//     step's body (Host.Crash, called from the body) or at the commit of
//     its record (CrashAt) is recorded by the next run as a failed
//     attempt (workflow.AbandonedAttemptMessage), exhausted if it was the
//     step's last, and StepCtx.Attempt of the next is one more, if the run
//     marked that body (the first body of a run, and the Do bodies beside
//     it: a crash in a later body goes uncounted, as on a node). A body
//     cut off by an eviction (the run's ctx cancelled) is the host's
//     graceful stop, and is not counted. attempts.go states the rules;
//     Host.NoAttemptMarkers turns them off.
//   - StepCtx.Enqueue queues a message on the actor's own queue with the
//     commit of the attempt's record, checked at the call as a node
//     checks it (the queue declared, the size, 32 messages an attempt, the
//     queue's depth): a commit that crashes (CrashAt) queues nothing, and a
//     step replayed from its history does not enqueue again.
//   - The limits of a node apply to a step's state, output and messages
//     (MaxStateBytes, MaxStepOutputBytes, MaxMessageBytes, MaxQueueDepth),
//     and its events (StepCtx.Broadcast) are published once its commit
//     applies (Host.Events).
//
// What it does not have: scheduled calls (StepCtx.Schedule fails), the
// actor's actions, and other actors (FakeClient stands in for them); test
// those with node/nodetest.
package workflowtest
