package server

import (
	"slices"
	"sync"
	"testing"
)

// What callers queue while the sender is busy leaves in one message, in
// the order it was queued, up to maxBatchBytes; a message larger than
// that goes alone rather than never.
func TestOutboxBatchesWhatIsQueued(t *testing.T) {
	o := newOutbox[int]()
	size := func(n int) int { return n }
	for _, n := range []int{1, 2, 3, maxBatchBytes, 4, maxBatchBytes / 2, maxBatchBytes / 2, 5} {
		if !o.put(n) {
			t.Fatal("put refused on an open outbox")
		}
	}
	done := make(chan struct{})
	var got [][]int
	for range 4 {
		b, ok := o.take(done, nil, size)
		if !ok {
			t.Fatal("take found nothing with messages queued")
		}
		got = append(got, b)
	}
	want := [][]int{
		{1, 2, 3},              // the next would pass the bound
		{maxBatchBytes},        // too large for company, sent alone
		{4, maxBatchBytes / 2}, // 4 + the half fit; the second half does not
		{maxBatchBytes / 2, 5}, // the rest
	}
	if !slices.EqualFunc(got, want, slices.Equal[[]int]) {
		t.Fatalf("batches %v, want %v", got, want)
	}

	// An empty outbox waits; closing done ends the wait.
	close(done)
	if b, ok := o.take(done, nil, size); ok {
		t.Fatalf("take on an empty outbox with done closed returned %v", b)
	}
}

// Nothing queued is lost or reordered between concurrent putters and the
// sender, and close hands back what the sender did not take, after which
// puts are refused (the putter keeps its message).
func TestOutboxLosesNothing(t *testing.T) {
	o := newOutbox[[2]int]()
	const putters, each = 8, 2000
	var wg sync.WaitGroup
	for p := range putters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if !o.put([2]int{p, i}) {
					t.Error("put refused on an open outbox")
					return
				}
			}
		}()
	}
	next := make([]int, putters)
	done := make(chan struct{})
	size := func([2]int) int { return 1000 }
	batches := 0
	for taken := 0; taken < putters*each; {
		b, ok := o.take(done, nil, size)
		if !ok {
			t.Fatal("take ended early")
		}
		batches++
		for _, m := range b {
			if m[1] != next[m[0]] {
				t.Fatalf("putter %d: got message %d, want %d", m[0], m[1], next[m[0]])
			}
			next[m[0]]++
		}
		taken += len(b)
	}
	wg.Wait()
	t.Logf("%d messages in %d batches", putters*each, batches)

	o.put([2]int{-1, 0})
	if rest := o.close(); len(rest) != 1 || rest[0] != [2]int{-1, 0} {
		t.Fatalf("close returned %v, want the one message not taken", rest)
	}
	if o.put([2]int{-1, 1}) {
		t.Fatal("put accepted after close")
	}
}
