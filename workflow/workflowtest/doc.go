// Package workflowtest runs workflows in tests without a cluster: Host is an
// in-memory actor (state, history, queues) that implements workflow.Host per
// activation, with a fake Clock, injected crashes at any commit, and Drive,
// a deterministic simulation loop that jumps time forward whenever the
// workflow is blocked; and Replay, which checks changed code against a
// history exported from a node (workflow.HistoryExport) before deploying
// it, running nothing.
//
// Messages are stamped (CreatedAt) with the Clock's time as they are sent,
// and keep it when put back in their queue (a race's loser gives back what
// it took). A message stamped exactly at a receive's deadline came too
// late for it: with the clock stopped at the deadline D, a message sent
// then does not reach the receive, which times out and leaves it queued,
// as a node's look at D that missed it would have (workflow.MessagePeeker).
package workflowtest
