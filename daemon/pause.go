package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/report"
)

// pauseReason says what pauses the daemon now ("" when nothing does): its
// --pause, or its Node's liveness.PauseAnnotation. While paused, nothing is
// removed, DELed or released: a run does not start, and one in progress
// stops before its next removal (prune.Deps.Paused).
func (d *Daemon) pauseReason() string {
	if d.cfg.Pause {
		return "--pause"
	}
	if v, ok := d.views.NodePause(); ok {
		return "annotation " + liveness.PauseAnnotation + "=" + v
	}
	return ""
}

// paused is pauseReason's verdict without its text: what the prune asks
// before each removal.
func (d *Daemon) paused() bool {
	if d.cfg.Pause {
		return true
	}
	_, ok := d.views.NodePause()
	return ok
}

// pause is what the daemon knows of its pause between runs.
type pause struct {
	mu     sync.Mutex
	why    string    // the pause in force, "" for none
	since  time.Time // when why began
	seen   bool      // why has been taken once
	heldUp bool      // a run was skipped or stopped by it: run once it lifts
}

// watchState follows, every interval until ctx ends, what the daemon says
// between runs: its dependencies' outages (health), its pause, whose gauge
// and log line change with it and whose held-back run starts as soon as it
// lifts, not at the next scheduled time, and its dry run in force.
func (d *Daemon) watchState(ctx context.Context, wg *sync.WaitGroup, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	d.notePause(ctx, wg)
	d.noteDryRun(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			d.health.observe(now, d.views.Problems())
			d.notePause(ctx, wg)
			d.noteDryRun(ctx)
		}
	}
}

// notePause takes the pause in force now: it sets the gauge, logs a change,
// and starts the run a lifted pause held back.
func (d *Daemon) notePause(ctx context.Context, wg *sync.WaitGroup) string {
	why := d.pauseReason()
	d.pause.mu.Lock()
	changed := !d.pause.seen || why != d.pause.why
	wasPaused := d.pause.why != ""
	if changed {
		d.pause.since = time.Now()
	}
	pausedFor := time.Since(d.pause.since)
	d.pause.why, d.pause.seen = why, true
	rerun := changed && why == "" && d.pause.heldUp
	if rerun {
		d.pause.heldUp = false
	}
	d.pause.mu.Unlock()
	d.metrics.SetPaused(why != "")
	if why != "" && pausedFor >= report.WarnPausedFor {
		d.problems.Warn(ctx, report.WarnPaused, fmt.Sprintf("paused for %s (%s): nothing is removed, DELed or released", pausedFor.Round(time.Minute), why))
	}
	switch {
	case !changed:
	case why != "":
		d.log.Warn("paused: nothing is removed, DELed or released until the pause is lifted", "pause", why)
	case wasPaused:
		d.log.Info("pause lifted", "run_now", rerun)
	}
	if rerun && wg != nil {
		wg.Go(func() { d.cycle(ctx) })
	}
	return why
}

// holdUp records that the pause skipped or stopped a run.
func (d *Daemon) holdUp() {
	d.pause.mu.Lock()
	d.pause.heldUp = true
	d.pause.mu.Unlock()
}
