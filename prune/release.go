package prune

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// logProgress logs the CNI DELs of the run every ProgressInterval until the
// returned function is called: one DEL can take a plugin's timeout, and a
// run of a thousand is otherwise silent until its end.
func (e *executor) logProgress(ctx context.Context, start time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(e.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				ok, failed := e.delsSucceeded.Load(), e.delsFailed.Load()
				e.opts.Logger.Info("cni del in progress", "elapsed_seconds", time.Since(start).Seconds(),
					slog.Group("cni_del", "attempted", e.delsAttempted.Load(), "succeeded", ok, "failed", failed,
						"held_seconds", e.gateHeld.held().Seconds()))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// reserveRelease takes one of the run's Release calls; false once the cap is
// reached. A refusal takes nothing, so that a call given back later (pace's
// done) can be taken again.
func (e *executor) reserveRelease() bool {
	n := e.releases.Add(1)
	if e.opts.MaxReleases > 0 && n > int64(e.opts.MaxReleases) {
		e.releases.Add(-1)
		return false
	}
	return true
}

// pace waits until the results file being handled may have its Release:
// one of the run's Release calls (MaxReleases), its sandbox free, a
// concurrency slot and the rate's and the gate's permission. false when it
// may not in this run (the cap is reached, Options.ReleaseUntil passed or
// the run ended): the file is then deferred. done gives back what pace took,
// the Release call too unless ran says that it was made.
func (w *worker) pace() (done func(ran bool), ok bool) {
	e := w.e
	// Taken first, so that no worker waits for a DEL that would not run,
	// and workers that wait at once never pass the cap together.
	if !e.reserveRelease() {
		return nil, false
	}
	unreserve := func() { e.releases.Add(-1) }
	ctx := e.paceCtx
	if ctx.Err() != nil {
		unreserve()
		return nil, false
	}
	id := cmp.Or(w.sandbox, w.name)
	if err := e.sandboxes.lock(ctx, id); err != nil {
		unreserve()
		return nil, false
	}
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		e.sandboxes.unlock(id)
		unreserve()
		return nil, false
	}
	done = func(ran bool) {
		<-e.slots
		e.sandboxes.unlock(id)
		if !ran {
			unreserve()
		}
	}
	// Waited for holding the slot: the rate then counts DELs as they start,
	// not workers queueing for a slot.
	if e.opts.ReleaseRate != nil {
		if err := e.opts.ReleaseRate.Wait(ctx); err != nil {
			done(false)
			return nil, false
		}
	}
	// Last of all: a pod that started while this DEL waited for its turn
	// comes first.
	if e.opts.ReleaseGate != nil {
		if err := e.gateHeld.wait(ctx, e.opts.ReleaseGate); err != nil {
			done(false)
			return nil, false
		}
	}
	return done, true
}

// dryRunNamed records the sandboxes of a results file that a dry run with
// DEL replay would release and remove (named); the workers call it at once.
func (e *executor) dryRunNamed(ids []SandboxID) {
	e.dryMu.Lock()
	defer e.dryMu.Unlock()
	if e.dryNamed == nil {
		e.dryNamed = map[SandboxID]struct{}{}
	}
	for _, id := range ids {
		e.dryNamed[id] = struct{}{}
	}
}

// release runs the Releaser for the file just read; false when it failed.
func (w *worker) release(name string) bool {
	w.counts.cniDel.Attempted++
	w.e.delsAttempted.Add(1)
	start := time.Now()
	err := w.e.opts.Release.Release(w.ctx, name, w.raw)
	if err != nil {
		w.counts.cniDel.Failed++
		w.e.delsFailed.Add(1)
		w.counts.errors++
		w.e.warnFile("cni del failed; file kept for the next run", "phase", w.phase, "file", name,
			"duration_seconds", time.Since(start).Seconds(), "error", err)
		return false
	}
	w.counts.cniDel.Succeeded++
	w.e.delsSucceeded.Add(1)
	if w.e.debug {
		w.e.opts.Logger.Debug("cni del", "phase", w.phase, "file", name, "duration_seconds", time.Since(start).Seconds())
	}
	return true
}
