package node

import "github.com/prometheus/client_golang/prometheus"

// collector exposes the node's counters to Prometheus, read at scrape time
// from the runtime and committer (which count with plain atomics, so the
// hot path pays nothing for metrics).
type collector struct {
	n                                         *Node
	calls, active, commits, batches, partsOwn *prometheus.Desc
}

func newCollector(n *Node) *collector {
	return &collector{
		n:        n,
		calls:    prometheus.NewDesc("rivet_calls_total", "Action calls received by this node.", nil, nil),
		active:   prometheus.NewDesc("rivet_active_actors", "Actors in memory on this node.", nil, nil),
		commits:  prometheus.NewDesc("rivet_commits_total", "Transactions committed by the group committer.", nil, nil),
		batches:  prometheus.NewDesc("rivet_commit_batches_total", "Store transactions the group committer sent.", nil, nil),
		partsOwn: prometheus.NewDesc("rivet_partitions_owned", "Partitions this node owns.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.calls
	ch <- c.active
	ch <- c.commits
	ch <- c.batches
	ch <- c.partsOwn
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.host.Stats()
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.Calls))
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(s.ActiveActors))
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(s.Commits))
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.CommitBatches))
	ch <- prometheus.MustNewConstMetric(c.partsOwn, prometheus.GaugeValue, float64(s.PartitionsOwned))
}
