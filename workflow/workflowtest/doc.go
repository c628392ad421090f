// Package workflowtest runs workflows in tests without a cluster: Host is an
// in-memory actor (state, history, queues) that implements workflow.Host per
// activation, with a fake Clock, injected crashes at any commit, and Drive,
// a deterministic simulation loop that jumps time forward whenever the
// workflow is blocked; and Replay, which checks changed code against a
// history exported from a node (workflow.HistoryExport) before deploying
// it, running nothing.
package workflowtest
