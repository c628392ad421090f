// Package runtime hosts actors on a node: it activates an actor on its
// first call, runs one turn at a time per actor, commits state changes before
// replies leave (an output gate), stores queue messages durably, and
// deactivates idle actors. It reads and writes only through storage, fenced
// on the partition claims it holds, so a node that lost a partition can
// never write to it again.
//
// The entry point is Host: New, Start, then Call, Send, Create, GetOrCreate,
// Get, Destroy, Inspect and List; Stop drains in-flight turns and flushes.
package runtime
