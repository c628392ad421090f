package cluster

import (
	"sync"

	"github.com/hashicorp/memberlist"
)

// metaDelegate hands memberlist this member's encoded metadata. It is the
// only part of memberlist.Delegate this package uses: no user messages, no
// extra push/pull state.
type metaDelegate struct {
	mu      sync.Mutex // guards the fields below; memberlist reads from its own goroutines
	meta    Meta
	leaving bool
	enc     []byte // wireMeta{meta, leaving}, at most memberlist.MetaMaxSize bytes
}

var _ memberlist.Delegate = (*metaDelegate)(nil)

// set replaces the metadata memberlist gossips from its next alive message
// on. It refuses metadata too large to gossip, leaving the old one.
func (d *metaDelegate) set(m Meta, leaving bool) error {
	enc, err := encodeMeta(m, leaving)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.meta, d.leaving, d.enc = m, leaving, enc
	return nil
}

// markLeaving keeps the metadata and adds the leaving mark.
func (d *metaDelegate) markLeaving() {
	d.mu.Lock()
	m := d.meta
	d.mu.Unlock()
	// encodeMeta has accepted m with the mark already (set checks the
	// marked size), so this cannot fail.
	_ = d.set(m, true)
}

func (d *metaDelegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.enc
}

func (d *metaDelegate) NotifyMsg([]byte)                           {}
func (d *metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *metaDelegate) LocalState(join bool) []byte                { return nil }
func (d *metaDelegate) MergeRemoteState(buf []byte, join bool)     {}
