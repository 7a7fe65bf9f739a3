package daemon

import (
	"strconv"
	"sync"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// dryRunState is the dry run in force as the daemon last took it, so that
// a change is logged once.
type dryRunState struct {
	mu  sync.Mutex
	why string
}

// dryRun says whether the daemon's removals are a dry run now, what
// decides it (the Node's liveness.DryRunAnnotation, over --dry-run, for a
// staged rollout: docs/prune.md#a-staged-rollout), and whether that is an
// annotation value that is neither true nor false.
func (d *Daemon) dryRun() (dry bool, why string, odd bool) {
	if v, ok := d.views.NodeDryRun(); ok {
		return v != "false", "annotation " + liveness.DryRunAnnotation + "=" + v, v != "true" && v != "false"
	}
	return d.cfg.Prune.DryRun, "--dry-run=" + strconv.FormatBool(d.cfg.Prune.DryRun), false
}

// pruneConfig is the prune's configuration for a run that starts now: the
// daemon's, with the dry run in force. A change since the last run is
// logged, at WARN for an annotation value that is neither true nor false.
func (d *Daemon) pruneConfig() prune.Config {
	c := d.cfg.Prune
	dry, why, odd := d.dryRun()
	c.DryRun = dry
	d.dryRunState.mu.Lock()
	changed := why != d.dryRunState.why
	d.dryRunState.why = why
	d.dryRunState.mu.Unlock()
	switch {
	case !changed:
	case odd:
		d.log.Warn("the Node's dry-run annotation is neither true nor false: a dry run, nothing is removed", "dry_run", dry, "by", why)
	default:
		d.log.Info("the dry run in force changed", "dry_run", dry, "by", why)
	}
	return c
}
