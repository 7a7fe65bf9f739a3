package ranges

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sweep-k8s/sweep/internal/nofollow"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
)

// Whereabouts' pools are the cluster's, in custom resources: a node alone
// cannot say how full one is. What it can say is how many addresses of each
// Whereabouts network its live pods hold, from the multus cache files the
// scheduled run keeps: beside the pool's size, an operator sees which
// nodes hold what.

// maxWhereaboutsNetworks bounds the networks that have a series of their
// own: their names come from files on the node. The rest are summed under
// network="other".
const maxWhereaboutsNetworks = 32

// WhereaboutsHeld is the gauge of the addresses this node's live pods hold
// in Whereabouts networks, by network, as the last complete scheduled run
// counted them: it notes the live results files as the run goes (File, a
// prune.Deps.OnFile) and counts them when it ends (Report).
type WhereaboutsHeld struct {
	desc *prometheus.Desc

	mu   sync.Mutex
	last map[string]int // nil until a complete run counted
	// live are the current run's live results files; runs come one at a
	// time.
	live liveFiles
}

// NewWhereaboutsHeld makes the gauge.
func NewWhereaboutsHeld() *WhereaboutsHeld {
	return &WhereaboutsHeld{desc: prometheus.NewDesc("sweep_whereabouts_addresses",
		"Addresses of Whereabouts networks that this node's live pods hold, by network (the multus cache's networkName; past 32 networks, other), as the last complete prune run read them from the cache.",
		[]string{"network"}, nil)}
}

// Describe implements prometheus.Collector.
func (g *WhereaboutsHeld) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *WhereaboutsHeld) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for network, n := range g.last {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), network)
	}
}

// set replaces the counts with a complete run's.
func (g *WhereaboutsHeld) set(counts map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = counts
}

// File notes f if it is a live results file (prune.Deps.OnFile).
func (g *WhereaboutsHeld) File(f prune.File) {
	if f.Phase == prune.PhaseResults && !f.Remove && (f.Reason == prune.ReasonPodLive || f.Reason == prune.ReasonSandboxLive) {
		g.live = append(g.live, f)
	}
}

// Report implements report.Reporter: a complete scheduled run saw every
// live pod's results file, and its count replaces the gauge's.
func (g *WhereaboutsHeld) Report(_ context.Context, r report.Run) {
	if !r.Started() {
		return // it saw no file, and may be reported beside one that runs
	}
	live := g.live
	g.live = nil
	if r.Kind == report.Scheduled && r.Completed() {
		g.set(live.whereabouts())
	}
}

// liveFiles are the results files a scheduled run kept because their pod or
// sandbox is live: the few files (a node's pods have one per attachment)
// whose addresses the gauge counts.
type liveFiles []prune.File

// whereabouts counts the addresses of Whereabouts networks in the live
// files, reading each again, as the run does: without following a link,
// regular files only, within the prune's size bound. A file that cannot be
// read so counts nothing: the gauge says what is known to be held.
func (l liveFiles) whereabouts() map[string]int {
	counts := map[string]int{}
	buf := make([]byte, prune.DefaultMaxFileSize)
	// The files come a cache at a time: each directory is opened once.
	var dir *os.File
	defer func() {
		if dir != nil {
			dir.Close()
		}
	}()
	for _, f := range l {
		path := filepath.Join(f.CacheDir, f.RelPath())
		if dir == nil || dir.Name() != filepath.Dir(path) {
			if dir != nil {
				dir.Close()
			}
			var err error
			if dir, err = nofollow.OpenDir(unix.AT_FDCWD, filepath.Dir(path)); err != nil {
				dir = nil
				continue
			}
		}
		var st unix.Stat_t
		fd, err := nofollow.OpenRegular(int(dir.Fd()), filepath.Base(path), unix.O_NOATIME, &st)
		if err != nil {
			continue
		}
		if st.Size <= int64(len(buf)) {
			if n, err := nofollow.ReadFull(fd, buf[:st.Size]); err == nil {
				countWhereabouts(counts, buf[:n])
			}
		}
		unix.Close(fd)
	}
	return counts
}

// countWhereabouts adds the addresses of content, a live pod's results
// file, to counts if its network's IPAM is Whereabouts.
func countWhereabouts(counts map[string]int, content []byte) {
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
	if _, ok := counts[network]; !ok && len(counts) >= maxWhereaboutsNetworks {
		network = "other"
	}
	counts[network] += len(r.IPs)
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
