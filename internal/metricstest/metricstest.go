// Package metricstest reads a node's Prometheus text exposition, for tests
// that check what an operator would scrape.
package metricstest

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
)

// Scrape GETs url (a /metrics endpoint) and returns each series ("name" or
// "name{labels}") with its value, and the sum of each metric name over its
// label sets (histograms' _count and _sum lines are names of their own).
func Scrape(url string) (series, sums map[string]float64, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	series, sums = map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s := line[:i]
		series[s] = v
		name, _, _ := strings.Cut(s, "{")
		sums[name] += v
	}
	return series, sums, sc.Err()
}
