package deleted

import "github.com/prometheus/client_golang/prometheus"

// lookupError is the lookups' label of a request that failed.
const lookupError = "error"

// metrics are the check's series, registered by the daemon (Collectors).
type metrics struct {
	outcomes *prometheus.CounterVec
	lookups  *prometheus.CounterVec
	checks   prometheus.Counter
	read     prometheus.Counter
	queue    prometheus.GaugeFunc
}

func newMetrics(queued func() int) *metrics {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_deleted_pods_total",
			Help: "Pods that left the view of the node's pods, by the outcome of their check: pruned (it removed or released something of the pod), nothing-left, kept (files still kept after its last attempt: the scheduled run's), alive (the API server still has the pod), static (a mirror pod: never checked), dropped (the queue was full).",
		}, []string{"outcome"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_deleted_pod_lookups_total",
			Help: "Deleted pods looked up in the API server before their check (a GET each, or one list of the node's pods for more than 8 at once), by result: gone, replaced (another pod of that name), alive, error (per failed request). At most one answer per pod.",
		}, []string{"result"}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_deleted_pod_checks_total",
			Help: "Targeted prune runs over the files of deleted pods; one covers the pods that came due within a few seconds of each other.",
		}),
		read: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_deleted_pod_files_read_total",
			Help: "Results files read to find the files of deleted pods: each once while it stays, unless a prune run reported it first.",
		}),
		queue: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sweep_deleted_pods_queued",
			Help: "Deleted pods waiting for their check (at most 4096).",
		}, func() float64 { return float64(queued()) }),
	}
	for _, o := range outcomes() {
		m.outcomes.WithLabelValues(o)
	}
	for _, v := range verdicts() {
		m.lookups.WithLabelValues(string(v))
	}
	m.lookups.WithLabelValues(lookupError)
	return m
}

// Collectors are the check's metrics, for the daemon's registry.
func (c *Checker) Collectors() []prometheus.Collector {
	m := c.metrics
	return []prometheus.Collector{m.outcomes, m.lookups, m.checks, m.read, m.queue}
}
