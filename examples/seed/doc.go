// Package seed holds the patterns of the seed document "Timers &
// Concurrency" as Go actors, with the seed's actor, queue and entry names,
// so that a reader of the seed recognises every line: durable timers,
// step timeouts and retries, join, race, fan-out/fan-in, scatter-gather
// across actors, poll with backoff, coordinator/worker RPC, child
// orchestration, and timeout with fallback.
//
// Where the seed calls an external HTTP API, the actors call the base URL
// in EXAMPLES_API_URL (package exampleapi).
//
// Join branches whose steps only do I/O (fetch-users, call-shard-a,
// run-child-a, ...) use workflow.Do rather than workflow.Step: a Do body
// gets no state, so it runs without holding the actor's turn and the
// branches fetch at the same time, as the seed's do. The entries are
// recorded and replayed as steps, under the seed's names.
package seed
