package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

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
	bytes int // read, of the histories held
}

// pagedHistory is one actor's history as read, sorted; never changed once
// held (pages of it are served at once).
type pagedHistory struct {
	seen    historyKeys
	size    int // bytes read
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
)

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
	if ph.size > historyPagesBytes {
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
}

// sweep drops what is too old, under mu.
func (p *historyPages) sweep(now time.Time) {
	for t, o := range p.byTag {
		if now.Sub(o.at) > historyPageAge {
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
func (h *Host) pagedWorkflow(ctx context.Context, prefix, tag string, more bool, limit int) (workflowStatus, []workflow.Entry, map[string]int, error) {
	now := time.Now()
	if more {
		kvs, err := h.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
		if err != nil {
			return workflowStatus{}, nil, nil, err
		}
		if ph := h.pages.get(tag, sumKeys(kvs), now); ph != nil {
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
		h.pages.put(tag, &pagedHistory{seen: sw.seen, size: sw.size, entries: sw.history, places: places, at: now})
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
