// Package seed holds the patterns of the seed document "Timers &
// Concurrency" as Go actors, with the seed's actor, queue and entry names,
// so that a reader of the seed recognises every line: durable timers,
// step timeouts and retries, join, race, fan-out/fan-in, scatter-gather
// across actors, poll with backoff, coordinator/worker RPC, child
// orchestration, and timeout with fallback.
//
// Where the seed calls an external HTTP API, the actors call the base URL
// in EXAMPLES_API_URL (package exampleapi).
package seed
