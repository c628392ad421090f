// Package ration rations log lines that a flood would repeat at the rate
// of its requests (calls refused, writes refused, connections waiting):
// one line per period says what the counters beside it keep counting.
package ration

import (
	"sync/atomic"
	"time"
)

// Every lets one caller through per period, without a lock: the callers
// that race for the same period see one of them win. The zero value lets
// the first through.
type Every struct {
	last atomic.Int64 // unix nanoseconds of the last let through; 0: none
}

// Allow reports whether the caller is the first since period ago.
func (e *Every) Allow(period time.Duration) bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if last != 0 && now-last < int64(period) {
		return false
	}
	return e.last.CompareAndSwap(last, now)
}
