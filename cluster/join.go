package cluster

// Join contacts the members at addrs now and merges their view of the
// cluster, returning how many answered. Gossip never re-contacts a member
// it declared dead, so two sides of a healed network partition stay apart
// until one joins the other: the node calls Join with the addresses of
// members it knows exist (from etcd) but does not see alive.
//
// The lifecycle lock is not held during the join (memberlist dials without
// a context, up to its TCP timeout per address), so Stop never waits for
// it; a join racing Stop fails at once on the closed transport.
func (c *Cluster) Join(addrs []string) (int, error) {
	c.life.Lock()
	running := c.state == running
	c.life.Unlock()
	if !running {
		return 0, ErrStopped
	}
	return c.ml.Join(addrs)
}
