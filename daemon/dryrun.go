package daemon

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
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
// daemon's, with the dry run in force (noteDryRun).
func (d *Daemon) pruneConfig(ctx context.Context) prune.Config {
	c := d.cfg.Prune
	c.DryRun = d.noteDryRun(ctx)
	return c
}

// noteDryRun takes the dry run in force now, before each run and every
// second between them (watchState): sweep_config_info says it, and a
// change is logged, at WARN for an annotation value that is neither true
// nor false and for one that removes under --dry-run. While an annotation
// removes under --dry-run, its Node has a Warning Event of it (at most one
// an hour): an operator who set daemon.dryRun=true must see which nodes
// remove all the same.
func (d *Daemon) noteDryRun(ctx context.Context) bool {
	dry, why, odd := d.dryRun()
	overrides := d.cfg.Prune.DryRun && !dry
	d.metrics.SetDryRun(dry)
	d.dryRunState.mu.Lock()
	changed := why != d.dryRunState.why
	d.dryRunState.why = why
	d.dryRunState.mu.Unlock()
	switch {
	case !changed:
	case odd:
		d.log.Warn("the Node's dry-run annotation is neither true nor false: a dry run, nothing is removed", "dry_run", dry, "by", why)
	case overrides:
		d.log.Warn("the Node's dry-run annotation overrides --dry-run: this node removes files", "dry_run", dry, "by", why)
	default:
		d.log.Info("the dry run in force changed", "dry_run", dry, "by", why)
	}
	if overrides {
		d.problems.Notice(ctx, report.WarnDryRunOverridden, fmt.Sprintf("removing files: %s overrides the daemon's --dry-run (the chart's daemon.dryRun)", why))
	}
	return dry
}
