// Package node runs a rivet node: it wires etcd (embedded or external), the
// storage layer, the actor runtime, the gRPC API and the HTTP endpoints for
// metrics and health, and owns every goroutine they start. A custom node
// binary is a registry plus Main, which reads cmd/node's flags and RIVET_*
// variables (ParseFlags) and stops on SIGTERM:
//
//	func main() { node.Main(rivet.MustSetup(myActor)) }
//
// or, configured in code, Run:
//
//	err := node.Run(ctx, node.DefaultConfig(), reg)
//
// A program that runs a node beside other work starts it with Start and
// stops it with Stop; it must also watch Node.Done, closed if the node
// fails on its own (Node.Err says why: its etcd died, or another process
// took its node ID over), after which it serves nothing until stopped and
// started again. Run does exactly that.
//
// Stop order (SIGTERM): refuse new calls, let the calls in progress finish,
// flush every pending commit, revoke the node's lease (so its partitions can
// be taken over at once), close etcd.
package node
