package ranges

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sweep-k8s/sweep/report"
)

// maxRangeNetworks bounds the host-local networks that have series: their
// names come from files on the node, which must not grow the series
// without bound. Networks past it, in name order, are counted in
// sweep_host_local_networks_omitted.
const maxRangeNetworks = 32

// rangesEvery is how often the ranges are read between prune runs. A read
// opens the configuration files and one file per reserved address, bounded
// by the ranges' sizes: cheap at this pace, and fresh enough for an alert
// that waits 15 minutes.
const rangesEvery = time.Minute

// rangeGauges are the gauges of host-local's ranges, from the last read. A
// collector of its own rather than gauge vectors: each read replaces the
// whole set, and a scrape must never see it half replaced (a network gone
// from the configuration must lose its series, which a vector would need a
// Reset for).
type rangeGauges struct {
	size, addresses, other, omitted, problems *prometheus.Desc

	mu sync.Mutex
	// rep is the last read's report, its counts capped.
	rep Report
	// omittedN counts the networks past maxRangeNetworks.
	omittedN int
	read     bool // a read has been done
}

func newRangeGauges() *rangeGauges {
	return &rangeGauges{
		size: prometheus.NewDesc("sweep_host_local_range_addresses",
			"Addresses host-local may allocate in a range of a host-local network of the CNI configuration (its subnet, from rangeStart to rangeEnd, less the gateway), by network and range (the subnet).",
			[]string{"network", "range"}, nil),
		addresses: prometheus.NewDesc("sweep_host_local_addresses",
			"Addresses of a host-local range by state, from the reservations on disk: in_use (by a sandbox the container runtime lists), dead (by a sandbox it does not list, past the minimum age: leaked), young (not listed yet, an ADD may be in progress), unknown (no pod sandbox's), free; without the runtime's list, reserved and free. The states sum to sweep_host_local_range_addresses.",
			[]string{"network", "range", "state"}, nil),
		other: prometheus.NewDesc("sweep_host_local_other_entries",
			"Entries of a host-local network's directory that hold no address of its configured ranges (other names, addresses outside every range, the gateway), by network.",
			[]string{"network"}, nil),
		omitted: prometheus.NewDesc("sweep_host_local_networks_omitted",
			"host-local networks of the CNI configuration that have no series: more than 32.",
			nil, nil),
		problems: prometheus.NewDesc("sweep_host_local_range_read_errors",
			"CNI configuration files and host-local network directories that the last read of the ranges could not read or parse; their networks have no series.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *rangeGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.size, g.addresses, g.other, g.omitted, g.problems} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *rangeGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.read {
		return // absent until the first read, rather than a false 0
	}
	for _, c := range g.rep.Counts {
		r := c.Subnet.String()
		ch <- prometheus.MustNewConstMetric(g.size, prometheus.GaugeValue, c.Size, c.Network, r)
		for s, n := range c.Addresses {
			ch <- prometheus.MustNewConstMetric(g.addresses, prometheus.GaugeValue, n, c.Network, r, string(s))
		}
	}
	for n, v := range g.rep.Other {
		ch <- prometheus.MustNewConstMetric(g.other, prometheus.GaugeValue, float64(v), n)
	}
	ch <- prometheus.MustNewConstMetric(g.omitted, prometheus.GaugeValue, float64(g.omittedN))
	ch <- prometheus.MustNewConstMetric(g.problems, prometheus.GaugeValue, float64(len(g.rep.Problems)))
}

// set replaces the gauges with a read's report and the number of networks
// left out of it.
func (g *rangeGauges) set(rep Report, omitted int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rep, g.omittedN, g.read = rep, omitted, true
}

// Reader keeps the gauges of host-local's ranges for the daemon: it reads
// them from its CNI configuration directory, with the runtime's sandboxes
// when it has them, every minute (Loop) and as each run ends (Report), so
// that what a run released shows at once.
type Reader struct {
	confDir string
	// grace: an unlisted sandbox's reservation younger than it is young.
	grace time.Duration
	// sandboxes returns the runtime's list of sandboxes, nil when there is
	// none to trust now.
	sandboxes func(ctx context.Context) Sandboxes
	gauges    *rangeGauges
	log       *slog.Logger

	mu sync.Mutex // one read at a time
	// lastProblems and lastOmitted are what was last warned of, so that a
	// read every minute warns of a change only.
	lastProblems string
	lastOmitted  int
}

// NewReader reads the ranges of the CNI configuration directory confDir:
// an unlisted sandbox's reservation younger than grace is young; sandboxes
// returns the runtime's list of sandboxes, nil when there is none to trust
// now.
func NewReader(confDir string, grace time.Duration, sandboxes func(context.Context) Sandboxes, log *slog.Logger) *Reader {
	return &Reader{confDir: confDir, grace: grace, sandboxes: sandboxes, gauges: newRangeGauges(), log: log}
}

// Collector is the gauges, for the daemon's registry.
func (r *Reader) Collector() prometheus.Collector { return r.gauges }

// Report implements report.Reporter: what a run released shows in the
// ranges at once. A run that did not start released nothing.
func (r *Reader) Report(ctx context.Context, run report.Run) {
	if run.Started() {
		r.Refresh(ctx)
	}
}

// Refresh reads the ranges once and sets the gauges; a read already in
// progress makes it return at once.
func (r *Reader) Refresh(ctx context.Context) {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	nets, problems := Networks(r.confDir)
	omitted := 0
	if len(nets) > maxRangeNetworks {
		omitted = len(nets) - maxRangeNetworks
		nets = nets[:maxRangeNetworks]
	}
	rep := Read(ctx, nets, Options{Sandboxes: r.sandboxes(ctx), Grace: r.grace})
	if ctx.Err() != nil {
		return // a read cut short would show ranges as missing
	}
	rep.Problems = append(problems, rep.Problems...)
	r.gauges.set(rep, omitted)
	r.warn(rep.Problems, omitted, len(nets))
}

// warn logs the problems and the networks left out when they changed.
func (r *Reader) warn(problems []error, omitted, counted int) {
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.Error())
	}
	slices.Sort(msgs)
	joined := strings.Join(msgs, "\n")
	if joined != r.lastProblems {
		r.lastProblems = joined
		for _, m := range msgs {
			r.log.Warn("cannot count a host-local network's addresses", "cni_conf_dir", r.confDir, "error", m)
		}
	}
	if omitted != r.lastOmitted {
		r.lastOmitted = omitted
		if omitted > 0 {
			r.log.Warn("too many host-local networks: only the first ones by name have series", "cni_conf_dir", r.confDir,
				"networks_counted", counted, "networks_omitted", omitted)
		}
	}
}

// Loop refreshes the ranges every rangesEvery until ctx ends.
func (r *Reader) Loop(ctx context.Context) {
	t := time.NewTicker(rangesEvery)
	defer t.Stop()
	for {
		r.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
