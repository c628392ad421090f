package node

import "github.com/prometheus/client_golang/prometheus"

// collector exposes the node's counters to Prometheus, read at scrape time
// from the runtime and committer (which count with plain atomics, so the
// hot path pays nothing for metrics).
type collector struct {
	n                                         *Node
	calls, active, commits, batches, partsOwn *prometheus.Desc
	forwards, claimed, handedOff              *prometheus.Desc
	renewals, losses, members                 *prometheus.Desc
}

func newCollector(n *Node) *collector {
	return &collector{
		n:        n,
		calls:    prometheus.NewDesc("rivet_calls_total", "Action calls received by this node.", nil, nil),
		active:   prometheus.NewDesc("rivet_active_actors", "Actors in memory on this node.", nil, nil),
		commits:  prometheus.NewDesc("rivet_commits_total", "Transactions committed by the group committer.", nil, nil),
		batches:  prometheus.NewDesc("rivet_commit_batches_total", "Store transactions the group committer sent.", nil, nil),
		partsOwn: prometheus.NewDesc("rivet_partitions_owned", "Partitions this node owns.", nil, nil),

		forwards:  prometheus.NewDesc("rivet_forwards_total", "Requests this node sent to the node owning their actor.", nil, nil),
		claimed:   prometheus.NewDesc("rivet_partitions_claimed_total", "Partitions this node claimed.", nil, nil),
		handedOff: prometheus.NewDesc("rivet_partitions_handed_off_total", "Partitions this node handed to another.", nil, nil),
		renewals:  prometheus.NewDesc("rivet_lease_renewals_total", "Renewals of this node's etcd lease.", nil, nil),
		losses:    prometheus.NewDesc("rivet_lease_losses_total", "Times this node lost its lease (and every partition with it).", nil, nil),
		members:   prometheus.NewDesc("rivet_cluster_members_alive", "Members gossip reports alive, this node included.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.calls
	ch <- c.active
	ch <- c.commits
	ch <- c.batches
	ch <- c.partsOwn
	for _, d := range []*prometheus.Desc{c.forwards, c.claimed, c.handedOff, c.renewals, c.losses, c.members} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.host.Stats()
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.Calls))
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(s.ActiveActors))
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(s.Commits))
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.CommitBatches))
	ch <- prometheus.MustNewConstMetric(c.partsOwn, prometheus.GaugeValue, float64(s.PartitionsOwned))
	ch <- prometheus.MustNewConstMetric(c.forwards, prometheus.CounterValue, float64(c.n.view.forwards.Load()))
	ch <- prometheus.MustNewConstMetric(c.claimed, prometheus.CounterValue, float64(c.n.claimed.Load()))
	ch <- prometheus.MustNewConstMetric(c.handedOff, prometheus.CounterValue, float64(c.n.handedOff.Load()))
	renewals, losses := c.n.own.LeaseStats()
	ch <- prometheus.MustNewConstMetric(c.renewals, prometheus.CounterValue, float64(renewals))
	ch <- prometheus.MustNewConstMetric(c.losses, prometheus.CounterValue, float64(losses))
	alive := 1
	if c.n.gossip != nil {
		alive = len(c.n.gossip.Alive())
	}
	ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(alive))
}
