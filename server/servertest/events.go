package servertest

import (
	"sync"

	"github.com/rivet-go/rivet"
)

// Events is a subscription for a Fake's SubscribeFunc: the events it was
// made with, then, if err is set, its end with err; otherwise it stays
// open until closed.
type Events struct {
	mu    sync.Mutex
	evs   []rivet.Event
	ready chan struct{}
	done  chan struct{}
	err   error
	once  sync.Once
}

// NewEvents returns a subscription holding evs, ended with err if not nil.
func NewEvents(err error, evs ...rivet.Event) *Events {
	f := &Events{evs: evs, ready: make(chan struct{}, 1), done: make(chan struct{}), err: err}
	f.ready <- struct{}{}
	if err != nil {
		close(f.done)
	}
	return f
}

// NodeID implements server.EventStream.
func (f *Events) NodeID() string { return "node-1" }

// Ready implements server.EventStream.
func (f *Events) Ready() <-chan struct{} { return f.ready }

// Take implements server.EventStream.
func (f *Events) Take(buf []rivet.Event) []rivet.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	buf = append(buf, f.evs...)
	f.evs = nil
	return buf
}

// Push adds evs to an open subscription's, for its subscriber to take
// (after the ones it holds).
func (f *Events) Push(evs ...rivet.Event) {
	f.mu.Lock()
	f.evs = append(f.evs, evs...)
	f.mu.Unlock()
	select {
	case f.ready <- struct{}{}:
	default: // a signal is pending already: Take will see these too
	}
}

// Done implements server.EventStream.
func (f *Events) Done() <-chan struct{} { return f.done }

// Err implements server.EventStream.
func (f *Events) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close implements server.EventStream.
func (f *Events) Close() {
	f.once.Do(func() {
		if f.err == nil {
			close(f.done)
		}
	})
}

// End ends an open subscription with err (the actor moved, say). Call it
// once, on one made without an error, before Close.
func (f *Events) End(err error) {
	f.once.Do(func() {
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		close(f.done)
	})
}
