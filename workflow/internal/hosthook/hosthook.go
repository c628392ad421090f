// Package hosthook lets the engine's own tests reach into
// workflowtest.Host without a public knob: workflowtest sets the hooks
// when it loads, the workflow package's tests call them.
package hosthook

// NoAttemptMarkers, set by workflowtest, makes the workflowtest.Host h
// points to one that marks no attempt and loads no marker: a step attempt
// that a crash cuts short goes uncounted and runs again with the same
// number. (Its activations still implement workflow.AttemptMarker, and
// MarkAttempt still keeps a body from starting once its activation has
// crashed, as before markers.) The
// engine's crash simulations compare a run with crashes to the same run
// without, which counting such attempts (a failed record more, a backoff)
// would not keep. Call it before h's first Run.
var NoAttemptMarkers func(h any)
