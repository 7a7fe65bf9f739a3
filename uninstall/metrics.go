package uninstall

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	runs, removedFiles, deletedObjects, failures prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_cleanup_runs_total",
			Help: "Uninstall cleanup runs started on this node, one per new content of the cleanup ConfigMap (and per restart before it is done).",
		}),
		removedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_cleanup_removed_files_total",
			Help: "Files and empty directories the uninstall cleanup removed on this node.",
		}),
		deletedObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_cleanup_deleted_objects_total",
			Help: "Cluster objects deleted by this daemon in the cluster phase (resources, then the DaemonSet and its RBAC).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_cleanup_failures_total",
			Help: "Uninstall cleanup failures: an invalid config, files that could not be removed, a failed cluster phase attempt.",
		}),
	}
}

// Collectors returns the uninstall cleanup's metrics for the daemon's
// registry.
func (c *Coordinator) Collectors() []prometheus.Collector {
	m := c.metrics
	return []prometheus.Collector{m.runs, m.removedFiles, m.deletedObjects, m.failures}
}
