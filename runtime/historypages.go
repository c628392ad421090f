package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// Paging a long history read the whole of it for every page (its order is
// the workflow's, which no key range follows): 80 pages of an 80,000-entry
// history read 6.4 million entries. The node keeps the sorted history of
// the actors being paged for a while, and serves a later page from it when
// the history's keys are as they were (historyKeys): a read of the keys
// alone, not of their values, decoded and sorted again. A change, or a
// page after the history's first that comes too late, reads it again, so a
// page shows what the history holds when it is served, as before.
type historyPages struct {
	mu    sync.Mutex
	byTag map[string]*pagedHistory
	bytes int // held, of the histories held (pagedHistory.size)
	// expiry drops what is held once it is too old when no page read
	// comes to sweep it: else a node that served one long history held
	// it, up to the bound, until its next history read.
	expiry *time.Timer
	// age is historyPageAge; 0 is that (tests shorten it).
	age time.Duration
	// closed: the host stopped; nothing is held any more, and no timer
	// outlives the host.
	closed bool
}

// pagedHistory is one actor's history as read, sorted; never changed once
// held (pages of it are served at once).
type pagedHistory struct {
	seen    historyKeys
	size    int // bytes held: read, and those of the decoded entries (heldBytes)
	entries []workflow.Entry
	places  map[string]int
	at      time.Time
}

const (
	// historyPageAge: a client pages at once; one that comes back later
	// reads the history again.
	historyPageAge = time.Minute
	// historyPagesBytes bounds what the node holds for paging, all actors
	// together; a larger history is read for each page.
	historyPagesBytes = 64 << 20
	// entryOverhead is what a decoded entry holds beyond the bytes read
	// of it: its Entry, and its place. Decoded, small entries hold about
	// 2.5 times what was read (100,000 steps: 19 MB read, 48 MB held), so
	// the bound counted in bytes read let the node hold 160 MiB.
	entryOverhead = int(unsafe.Sizeof(workflow.Entry{})) + 64
)

// heldBytes is about what a history of n entries, of which read bytes
// were read, holds decoded, sorted and placed.
func heldBytes(read, n int) int { return read + n*entryOverhead }

func (p *historyPages) maxAge() time.Duration {
	if p.age > 0 {
		return p.age
	}
	return historyPageAge
}

// get returns tag's history if held, not too old, and its keys are seen.
func (p *historyPages) get(tag string, seen historyKeys, now time.Time) *pagedHistory {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweep(now)
	ph := p.byTag[tag]
	if ph == nil || ph.seen != seen {
		return nil
	}
	return ph
}

// put holds ph as tag's history, making room by dropping the oldest held.
func (p *historyPages) put(tag string, ph *pagedHistory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ph.size > historyPagesBytes || p.closed {
		return
	}
	p.sweep(ph.at)
	if p.byTag == nil {
		p.byTag = map[string]*pagedHistory{}
	}
	if old := p.byTag[tag]; old != nil {
		p.drop(tag, old)
	}
	for p.bytes+ph.size > historyPagesBytes {
		var oldestTag string
		var oldest *pagedHistory
		for t, o := range p.byTag {
			if oldest == nil || o.at.Before(oldest.at) {
				oldestTag, oldest = t, o
			}
		}
		p.drop(oldestTag, oldest)
	}
	p.byTag[tag] = ph
	p.bytes += ph.size
	p.arm()
}

// arm sets expiry for the oldest history held, if it is not set. Under mu.
func (p *historyPages) arm() {
	if p.expiry != nil || len(p.byTag) == 0 {
		return
	}
	var oldest time.Time
	for _, o := range p.byTag {
		if oldest.IsZero() || o.at.Before(oldest) {
			oldest = o.at
		}
	}
	p.expiry = time.AfterFunc(time.Until(oldest.Add(p.maxAge()))+time.Millisecond, p.expire)
}

// expire drops what is too old, and sets expiry for what is left.
func (p *historyPages) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expiry = nil
	if p.closed {
		return
	}
	p.sweep(time.Now())
	p.arm()
}

// close drops everything held and stops the expiry timer, for the host's
// stop.
func (p *historyPages) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.expiry != nil {
		p.expiry.Stop()
		p.expiry = nil
	}
	p.byTag, p.bytes = nil, 0
}

// sweep drops what is too old, under mu.
func (p *historyPages) sweep(now time.Time) {
	for t, o := range p.byTag {
		if now.Sub(o.at) > p.maxAge() {
			p.drop(t, o)
		}
	}
}

func (p *historyPages) drop(tag string, ph *pagedHistory) {
	delete(p.byTag, tag)
	p.bytes -= ph.size
}

// pagedWorkflow returns the actor's workflow status and its history in the
// history's order, with the places pageSorted needs: for a page after the
// first (more), from what the node holds if the history's keys are as they
// were; else read, and held for the pages to come if a limit leaves some.
// Held by the actor's storage prefix, which names it alone (a page token's
// tag is a hash of its name and key).
func (h *Host) pagedWorkflow(ctx context.Context, prefix string, more bool, limit int) (workflowStatus, []workflow.Entry, map[string]int, error) {
	now := time.Now()
	if more {
		kvs, err := h.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
		if err != nil {
			return workflowStatus{}, nil, nil, err
		}
		if ph := h.pages.get(prefix, sumKeys(kvs), now); ph != nil {
			st, err := h.readWorkflowStatus(ctx, prefix)
			return st, ph.entries, ph.places, err
		}
	}
	sw, err := h.readWorkflow(ctx, prefix)
	if err != nil {
		return workflowStatus{}, nil, nil, err
	}
	places := sortHistory(sw.history)
	if limit > 0 && len(sw.history) > limit {
		h.pages.put(prefix, &pagedHistory{seen: sw.seen, size: heldBytes(sw.size, len(sw.history)), entries: sw.history, places: places, at: now})
	}
	return sw.status, sw.history, places, nil
}

// readWorkflowStatus reads the workflow's status alone.
func (h *Host) readWorkflowStatus(ctx context.Context, prefix string) (workflowStatus, error) {
	var st workflowStatus
	kv, err := h.store.Get(ctx, prefix+storage.WorkflowStatusSuffix)
	switch {
	case err == nil:
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			return st, fmt.Errorf("workflow status does not decode: %w", err)
		}
	case !isNotFound(err):
		return st, err
	}
	return st, nil
}
