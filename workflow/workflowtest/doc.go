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
package workflowtest
