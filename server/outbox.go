package server

import (
	"runtime"
	"sync"
)

// outbox queues the messages of many goroutines for one stream's sender
// goroutine, which sends everything queued by the time it runs as one
// stream message. A forwarded call is small, and most of what one gRPC
// message costs (framing, a hand-off to the transport's writer, a write
// system call on each side and the wake-up of the reader) does not grow
// with its size; under load the calls of many callers share that cost.
// Nothing waits to fill a batch: an idle stream sends a lone message at
// once.
type outbox[T any] struct {
	mu     sync.Mutex
	queue  []T
	closed bool
	ready  chan struct{} // holds a token while the queue may be non-empty
}

func newOutbox[T any]() *outbox[T] { return &outbox[T]{ready: make(chan struct{}, 1)} }

// put queues m for the sender; false if the outbox is closed, when m is
// the caller's again.
func (o *outbox[T]) put(m T) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	o.queue = append(o.queue, m)
	first := len(o.queue) == 1
	o.mu.Unlock()
	if first {
		select {
		case o.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// maxBatchBytes bounds the messages that share one stream message, so that
// a batch stays far below the transport's message size limit and one
// large payload does not hold up many small ones for long. A message
// larger than this goes alone.
const maxBatchBytes = 256 << 10

// take waits until messages are queued, or done is closed (false), and
// returns the oldest of them, up to maxBatchBytes by size (at least one),
// in buf or in a slice that takes its place: the caller passes back the
// previous batch, emptied, as buf.
func (o *outbox[T]) take(done <-chan struct{}, buf []T, size func(T) int) ([]T, bool) {
	for {
		o.mu.Lock()
		if len(o.queue) > 0 {
			break
		}
		o.mu.Unlock()
		select {
		case <-o.ready:
		case <-done:
			return buf[:0], false
		}
		// The goroutines that became runnable with the one that woke
		// this sender (a burst of requests read from one socket read,
		// say) queue their messages before it takes the batch: yielding
		// once costs far less than the message it saves.
		// (Yielding again while the queue grows gave no larger batches.)
		runtime.Gosched()
	}
	n, bytes := 0, 0
	for n < len(o.queue) {
		bytes += size(o.queue[n])
		if n > 0 && bytes > maxBatchBytes {
			break
		}
		n++
	}
	if n == len(o.queue) { // the usual case: hand over the queue itself
		out := o.queue
		o.queue = buf[:0]
		o.mu.Unlock()
		return out, true
	}
	buf = append(buf[:0], o.queue[:n]...)
	rest := copy(o.queue, o.queue[n:])
	clear(o.queue[rest:])
	o.queue = o.queue[:rest]
	o.mu.Unlock()
	return buf, true
}

// close refuses every later put and returns what was queued and not taken.
func (o *outbox[T]) close() []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	rest := o.queue
	o.queue = nil
	return rest
}
