// Package client is the Go SDK for calling a rivet cluster over gRPC.
//
//	c, err := client.New("") // RIVET_ENDPOINT, or localhost:6420
//	if err != nil { ... }
//	defer c.Close()
//	n, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "main"), "increment", 5)
//
// *Client implements rivet.Client (package caller), so code that calls
// actors reads the same inside an action and outside the cluster. For the
// operations beyond Call and Send (SendWait, State, Inspect, Destroy, create
// input, Subscribe to the actor's events), take an *ActorHandle from c.Actor.
//
// Errors come back as *rivet.Error with the kind the node gave them:
// errors.Is(err, rivet.ErrNotFound) works as it does inside the node, and an
// actor's own UserError arrives with its code and metadata (errors.As).
//
// A node with TLS needs WithTLS (its CA, and under mTLS a client
// certificate); a node with a token needs WithToken, or $RIVET_TOKEN in the
// environment, which New reads when given no WithToken. A refused token is
// rivet.ErrUnauthenticated.
//
// A node answers UNAVAILABLE while an actor's partition moves between
// nodes, or while the node that owned it has died and its lease has not yet
// run out; the client retries such calls for up to 15 s, or until the
// context's deadline if that comes first (see WithRetry), so a rebalance,
// or a node's failover with default settings (3.3-5 s), is a delay, not an
// error, for the caller. It makes no retry within 250 ms of the deadline
// (a quarter of the call's time, if less): the call, or the subscription,
// then ends with its last attempt's error (most often UNAVAILABLE, not
// sent), not an attempt cut off by the deadline (DEADLINE_EXCEEDED, its
// outcome unknown). Give calls that should ride out a failover more than
// that. A client of several node addresses retries at once, on another of
// them, a call that the node it reached refused because it is stopping
// (node.stopping: it ran nothing), at most as many times in a call as it
// has addresses; the backoff applies to the rest. (With WithDirectRouting
// an actor call goes to its owner each time, and the stopping owner is the
// only node that can serve it until it hands its partitions over: those
// retries reach it again, and then back off.)
//
// A node gone without a word (a cut network, a frozen host) is found by
// keepalive pings within about 15 s: the calls in flight on it then fail,
// and those that may be retried (below) are, on another node when the
// client has several node addresses or WithDirectRouting. With
// WithDirectRouting, calls and subscriptions in flight straight to an
// owner are cut off sooner, once the cluster's member list no longer has
// the owner as live (its lease lost: 2-3 s with default settings) and the
// client, asking every 2 s by default, sees it: the call fails
// UNAVAILABLE, naming the node, its outcome unknown, and is retried only
// if it has no side effects (below); a subscription moves on to the new
// owner.
//
// A call that fails after it may have run is never retried with side
// effects: its node was killed mid-call, or its deadline ran out. The error
// then says so: rivet.OutcomeUnknown(err) is true, and a Send, Create or
// state-changing Call sent again could run twice. Reads (Get, State,
// Inspect, History...), GetOrCreate and read-only calls (Query,
// rivet.CallQuery: the node runs only a read-only action for them) are
// retried through it, as they leave the actor's state as it was. A call that never had a connection to a node (none
// could be made, or none became ready before the deadline) did not run:
// it is retried like any other, and its error, a deadline's included, is
// not of an unknown outcome.
//
// WithTracing traces the client's calls with OpenTelemetry and sends their
// trace context to the node, whose spans, with tracing on there, join the
// caller's trace across the forwarding hop (docs/deploy.md, "Tracing").
package client
