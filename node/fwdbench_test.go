package node_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// fwdPartitions is the partition count of the forwarding benchmark's
// cluster.
const fwdPartitions = 64

// fwdResult is one case of BenchmarkForwarding, for the closing table.
type fwdResult struct {
	rate     float64
	p50, p99 time.Duration
	cpu      time.Duration // CPU time of the whole process per call
}

// BenchmarkForwarding measures action calls in a two-node cluster (nodes
// "a" and "b" in this process, one embedded etcd, gossip on loopback), each
// caller on its own actor, every actor owned by node a:
//
//   - direct: the Go client calls node a, which serves the call;
//   - forwarded: the client calls node b, which forwards the request to a
//     (one hop) and passes the reply back.
//
// Actions: query, the read-only counter getCount; mutate, counter increment
// (the reply leaves once the change is durable in etcd). 16 and 64
// concurrent callers share one client per target node. Reported: calls/s,
// p50/p99 latency in microseconds, and for forwarded cases the ratio to the
// direct case measured just before (x-direct); a table of all cases is
// printed at the end. "interleaved" measures the same ratio from eight
// short forwarded rounds, each between two direct ones (median, min and
// max), which a machine whose speed drifts skews far less. Also reported: allocations and CPU time (user and
// system, of this whole process) per call, which hold up when other work
// shares the machine, as calls/s do not.
func BenchmarkForwarding(b *testing.B) {
	reg, err := examples.Registry()
	if err != nil {
		b.Fatal(err)
	}
	endpoints := etcdtest.Start(b)
	startCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(id string, join []string) *node.Node {
		// Cleanups run last-registered first: node b, then a, then etcd.
		return startNode(b, startCtx, clusterConfig(b, id, endpoints, "/fwd-bench/", fwdPartitions, join), reg)
	}
	na := start("a", nil)
	nb := start("b", []string{na.GossipAddr()})

	// Wait until the cluster has settled: both nodes own partitions, all 64
	// are owned, and each is on the node rendezvous hashing gives it, so
	// that no handoff moves an actor of the benchmark while it runs.
	want := placement.Table(fwdPartitions, []string{"a", "b"})
	settled := func() bool {
		oa, ob := na.Ownership().Owned(), nb.Ownership().Owned()
		if oa == 0 || ob == 0 || oa+ob != fwdPartitions {
			return false
		}
		for p, id := range want {
			n := na
			if id == "b" {
				n = nb
			}
			if !n.Ownership().Owns(uint32(p)) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(time.Minute)
	for !settled() {
		if time.Now().After(deadline) {
			b.Fatalf("cluster not settled within a minute: a owns %d, b owns %d partitions",
				na.Ownership().Owned(), nb.Ownership().Owned())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// One actor key per caller, each in a partition node a owns.
	var keys []string
	for i := 0; len(keys) < 64; i++ {
		k := fmt.Sprintf("fwd-%d", i)
		if na.Host().Owns(placement.Partition("counter", storage.EncodeKey([]string{k}), fwdPartitions)) {
			keys = append(keys, k)
		}
	}

	// "routed" is a client of node b that routes by the partition table
	// (client.WithDirectRouting): no hop, whichever node it was given.
	clients := map[string]*client.Client{}
	for target, n := range map[string]*node.Node{"direct": na, "forwarded": nb, "routed": nb} {
		var opts []client.Option
		if target == "routed" {
			opts = append(opts, client.WithDirectRouting(0))
		}
		c, err := client.New(n.GRPCAddr(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		clients[target] = c
	}

	ctx := context.Background()
	callsOf := func(c *client.Client, action string, callers int) []func() error {
		do := make([]func() error, callers)
		for i := range callers {
			h := c.Actor("counter", keys[i])
			if action == "query" {
				do[i] = func() error { _, err := h.Call(ctx, "getCount"); return err }
			} else {
				do[i] = func() error { _, err := h.Call(ctx, "increment", 1); return err }
			}
		}
		return do
	}
	results := map[string]fwdResult{}
	interleaved := map[string][]float64{}
	actions := []string{"query", "mutate"}
	callerCounts := []int{16, 64}
	targets := []string{"direct", "forwarded", "routed"}
	for _, action := range actions {
		for _, callers := range callerCounts {
			for _, target := range targets {
				name := fmt.Sprintf("%s/callers=%d/%s", action, callers, target)
				b.Run(name, func(b *testing.B) {
					do := callsOf(clients[target], action, callers)
					for i := range do {
						if err := do[i](); err != nil { // warm up: activate the actor, open the peer connection
							b.Fatal(err)
						}
					}
					if target == "routed" {
						// The first calls load the client's table in the
						// background; give it a moment before measuring.
						for t0 := time.Now(); time.Since(t0) < 300*time.Millisecond; {
							if err := do[0](); err != nil {
								b.Fatal(err)
							}
						}
					}
					sa0, sb0 := na.Host().Stats(), nb.Host().Stats()
					b.ReportAllocs()
					cpu0, w0 := processCPU(b), processWrites(b)
					rate, all := driveCallers(b, do)
					cpu, writes := processCPU(b)-cpu0, processWrites(b)-w0
					// Every call must have been served by node a, whichever
					// node received it.
					sa, sb := na.Host().Stats(), nb.Host().Stats()
					if got := sa.Calls - sa0.Calls; got < uint64(b.N) {
						b.Fatalf("node a served %d of %d calls", got, b.N)
					}
					if got := sb.Calls - sb0.Calls; got != 0 {
						b.Fatalf("node b served %d calls itself, want 0", got)
					}
					r := fwdResult{
						rate: rate,
						p50:  all[len(all)/2],
						p99:  all[len(all)*99/100],
						cpu:  cpu / time.Duration(b.N),
					}
					// The last run (the one at the full -benchtime) is the
					// one the table keeps.
					results[name] = r
					b.ReportMetric(r.rate, "calls/s")
					b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
					b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
					b.ReportMetric(float64(r.cpu.Nanoseconds())/1e3, "cpu-µs/call")
					b.ReportMetric(float64(writes)/float64(b.N), "writes/call")
					if target != "direct" {
						if d, ok := results[fmt.Sprintf("%s/callers=%d/direct", action, callers)]; ok {
							b.ReportMetric(r.rate/d.rate, "x-direct")
						}
					}
					b.ReportMetric(0, "ns/op")
				})
			}
			// The same ratio from short rounds that alternate direct and
			// forwarded calls, each forwarded round against the mean of
			// the direct rounds on either side of it: on a machine whose
			// speed drifts (a shared VM), the ratio of two long runs one
			// after the other measures the drift as much as the hop.
			name := fmt.Sprintf("%s/callers=%d/interleaved", action, callers)
			b.Run(name, func(b *testing.B) {
				direct, forwarded := callsOf(clients["direct"], action, callers), callsOf(clients["forwarded"], action, callers)
				const rounds, round = 8, 250 * time.Millisecond
				for range b.N {
					var ratios []float64
					prev := timedRate(b, direct, round)
					for range rounds {
						f := timedRate(b, forwarded, round)
						d := timedRate(b, direct, round)
						ratios = append(ratios, f/((prev+d)/2))
						prev = d
					}
					slices.Sort(ratios)
					interleaved[fmt.Sprintf("%s/%d", action, callers)] = ratios
					b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "x-direct-median")
					b.ReportMetric(ratios[0], "x-direct-min")
					b.ReportMetric(ratios[rounds-1], "x-direct-max")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}

	fmt.Printf("\nforwarded vs direct (two nodes and etcd in one process, every actor on node a)\n")
	fmt.Printf("%-7s %7s | %9s %9s %9s %8s | %9s %9s %9s %8s | %10s | %s\n",
		"action", "callers", "direct/s", "p50", "p99", "cpu/call", "fwd/s", "p50", "p99", "cpu/call", "fwd/direct", "routed/direct")
	for _, action := range actions {
		for _, callers := range callerCounts {
			d, dok := results[fmt.Sprintf("%s/callers=%d/direct", action, callers)]
			f, fok := results[fmt.Sprintf("%s/callers=%d/forwarded", action, callers)]
			if !dok || !fok {
				continue // filtered out by -bench
			}
			routed := "-"
			if r, ok := results[fmt.Sprintf("%s/callers=%d/routed", action, callers)]; ok {
				routed = fmt.Sprintf("%.2fx", r.rate/d.rate)
			}
			fmt.Printf("%-7s %7d | %9.0f %9s %9s %8s | %9.0f %9s %9s %8s | %9.2fx | %s\n", action, callers,
				d.rate, fwdDur(d.p50), fwdDur(d.p99), fwdDur(d.cpu), f.rate, fwdDur(f.p50), fwdDur(f.p99), fwdDur(f.cpu), f.rate/d.rate, routed)
		}
	}
	for _, action := range actions {
		for _, callers := range callerCounts {
			if r := interleaved[fmt.Sprintf("%s/%d", action, callers)]; r != nil {
				fmt.Printf("%-7s %7d | forwarded / direct in alternating rounds: median %.2fx, rounds %s\n",
					action, callers, (r[len(r)/2-1]+r[len(r)/2])/2, fmtRatios(r))
			}
		}
	}
}

// timedRate runs the calls of do, one caller each, for about d and
// returns the calls per second; any failed call fails the benchmark.
func timedRate(b *testing.B, do []func() error, d time.Duration) float64 {
	b.Helper()
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i := range do {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := do[i](); err != nil {
					failed.Add(1)
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d calls failed", n)
	}
	return float64(calls.Load()) / time.Since(start).Seconds()
}

func fmtRatios(r []float64) string {
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// fwdDur prints a latency to the microsecond, or to 0.1 ms above 10 ms.
func fwdDur(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
