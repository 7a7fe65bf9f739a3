package prune

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// remove carries out a removal decided on the state st: it re-checks that
// the liveness views are still synced and that the entry is still the same
// regular file, no newer than planned, then unlinks it relative to the
// directory.
func (w *worker) remove(dirfd int, name string, st unix.Stat_t, d Decision) Decision {
	release := w.e.opts.Release != nil && w.phase == PhaseResults
	if w.e.opts.DryRun {
		if release {
			if !w.e.reserveRelease() {
				return keep(ReasonCNIDelDeferred)
			}
			w.counts.cniDel.Attempted++ // would run
		}
		return d
	}
	// ran says whether the Release was made: a file kept by the re-check
	// spends none of the run's DELs.
	ran := false
	if release {
		// Before the re-check: the wait for a slot and the rate may be
		// long, and the re-check must be as late as it can.
		done, ok := w.pace()
		if !ok {
			if w.e.stop.Load() {
				return keep(w.e.stopReason()) // not deferred: the run stops
			}
			return keep(ReasonCNIDelDeferred)
		}
		defer func() { done(ran) }()
	}
	var now unix.Stat_t
	err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return keep(reasonVanished)
	}
	if err != nil {
		w.e.warnFile("cannot re-check file", "phase", w.phase, "file", name, "error", err)
		w.counts.errors++
		return keep(ReasonError)
	}
	if now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev ||
		time.Unix(now.Mtim.Unix()).After(time.Unix(st.Mtim.Unix())) {
		return keep(ReasonChanged)
	}
	if release {
		// The DEL is the destructive step now: it needs the same fresh view
		// as the unlink, and a run that stops spends none of its budget.
		if r, halt := w.e.halt(); halt {
			return keep(r)
		}
		ran = true
		if !w.release(name) {
			return keep(ReasonCNIDelFailed)
		}
	}
	return w.unlink(dirfd, name, d)
}

// unlink removes name relative to the directory once the views are known to
// be synced. A file that is gone already was removed by someone else, not by
// this run (reasonVanished).
func (w *worker) unlink(dirfd int, name string, d Decision) Decision {
	if w.e.opts.DryRun {
		return d
	}
	if r, halt := w.e.halt(); halt {
		return keep(r)
	}
	err := unix.Unlinkat(dirfd, name, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return keep(reasonVanished)
	case err != nil:
		w.e.warnFile("cannot remove file", "phase", w.phase, "file", name, "error", err)
		w.counts.errors++
		return keep(ReasonError)
	}
	return d
}
