package daemon

import (
	"encoding/json"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sweep-k8s/sweep/prune"
)

// Whereabouts' pools are the cluster's, in custom resources: a node alone
// cannot say how full one is. What it can say is how many addresses of each
// Whereabouts network its live pods hold, from the multus cache files the
// scheduled run reads anyway: beside the pool's size, an operator sees which
// nodes hold what.

// maxWhereaboutsNetworks bounds the networks that have a series of their
// own: their names come from files on the node. The rest are summed under
// network="other".
const maxWhereaboutsNetworks = 32

// whereaboutsHeld is the gauge of the addresses this node's live pods hold
// in Whereabouts networks, by network, as the last complete scheduled run
// counted them.
type whereaboutsHeld struct {
	desc *prometheus.Desc

	mu   sync.Mutex
	last map[string]int // nil until a complete run counted
}

func newWhereaboutsHeld() *whereaboutsHeld {
	return &whereaboutsHeld{desc: prometheus.NewDesc("sweep_whereabouts_addresses",
		"Addresses of Whereabouts networks that this node's live pods hold, by network (the multus cache's networkName; past 32 networks, other), as the last complete prune run read them from the cache.",
		[]string{"network"}, nil)}
}

// Describe implements prometheus.Collector.
func (g *whereaboutsHeld) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *whereaboutsHeld) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for network, n := range g.last {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), network)
	}
}

// set replaces the counts with a complete run's.
func (g *whereaboutsHeld) set(counts map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = counts
}

// whereaboutsCount counts one run's live results files.
type whereaboutsCount map[string]int

// add counts the addresses of content, a live pod's results file, if its
// network's IPAM is Whereabouts. A file it cannot read as one counts
// nothing: the gauge says what is known to be held.
func (c whereaboutsCount) add(_ prune.File, content []byte) {
	var f struct {
		NetworkName string          `json:"networkName"`
		Config      []byte          `json:"config"`
		Result      json.RawMessage `json:"result"`
	}
	if json.Unmarshal(content, &f) != nil || f.NetworkName == "" || !whereaboutsConfig(f.Config) {
		return
	}
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if json.Unmarshal(f.Result, &r) != nil || len(r.IPs) == 0 {
		return
	}
	network := f.NetworkName
	if _, ok := c[network]; !ok && len(c) >= maxWhereaboutsNetworks {
		network = "other"
	}
	c[network] += len(r.IPs)
}

// whereaboutsConfig reports whether a cached network config, a plugin's or
// a list's, allocates with Whereabouts.
func whereaboutsConfig(conf []byte) bool {
	type ipam struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	var c struct {
		ipam
		Plugins []ipam `json:"plugins"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return false
	}
	if c.IPAM.Type == "whereabouts" {
		return true
	}
	for _, p := range c.Plugins {
		if p.IPAM.Type == "whereabouts" {
			return true
		}
	}
	return false
}
