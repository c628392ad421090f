package cluster

import "errors"

var (
	// ErrInvalidConfig is wrapped by every error Start returns for a
	// Config it refuses; the message says which field is wrong.
	ErrInvalidConfig = errors.New("cluster: invalid config")

	// ErrMetaTooLarge is returned by Start and UpdateMeta when the encoded
	// metadata does not fit in memberlist's node meta (memberlist would
	// panic on it).
	ErrMetaTooLarge = errors.New("cluster: meta too large")

	// ErrStopped is returned by methods that need a running member after
	// Stop or Leave.
	ErrStopped = errors.New("cluster: stopped")

	// ErrBroadcastTimeout is returned by UpdateMeta and Leave when the
	// gossip of the change was not confirmed in time. The change is made
	// locally all the same: an update still spreads later (push/pull), a
	// leave still shuts down and is then detected as a failure.
	ErrBroadcastTimeout = errors.New("cluster: broadcast not confirmed before timeout")
)
