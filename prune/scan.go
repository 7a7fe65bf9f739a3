package prune

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/nofollow"
)

// worker handles files one at a time with its own read buffer and counts, so
// workers share nothing but the stop flag.
type worker struct {
	e     *executor
	ctx   context.Context
	cache cache
	phase Phase
	// planner is the executor's, with the rules of the worker's cache.
	planner Planner
	buf     []byte
	// raw is the content of the results file being handled, a slice of buf.
	raw []byte
	// name and sandbox are the results file being handled and its
	// sandbox, for the Release's pacing.
	name, sandbox string
	counts        counts
	referenced    map[SandboxID]struct{}
	// pending are results files that wait for a witness (Planner.Witnessed);
	// current holds the UIDs of live pods that have a results file of a
	// sandbox not from an earlier boot: that witness.
	pending []string
	current map[string]struct{}
	// scratchKept holds the sandboxes of the scratch files kept (phase 2).
	scratchKept map[SandboxID]struct{}
	// targeted holds, in a targeted run, the sandboxes of the results
	// files of targeted pods.
	targeted map[SandboxID]struct{}
	// siblings, when set, are the verdicts that decide a results file
	// without reading it (Planner.Carriable); shared by the phase's
	// workers.
	siblings *siblingVerdicts
}

func (e *executor) newWorker(ctx context.Context, c cache, phase Phase) *worker {
	w := &worker{e: e, ctx: ctx, cache: c, phase: phase, planner: e.planner, counts: newCounts()}
	w.planner.RequirePodUID = c.requirePodUID
	if phase == PhaseResults {
		w.buf = make([]byte, e.opts.MaxFileSize)
		w.referenced = map[SandboxID]struct{}{}
		w.current = map[string]struct{}{}
		w.targeted = map[SandboxID]struct{}{}
		w.siblings = e.siblings
	} else {
		w.scratchKept = map[SandboxID]struct{}{}
	}
	return w
}

// results handles one results file. newer is nil during the scan; in the
// witness pass after it, it holds the UIDs of pods with a sandbox of the
// current boot, and name is a file the scan left pending.
func (w *worker) results(dirfd int, name string, typ os.FileMode, newer map[string]struct{}) {
	if newer == nil {
		w.counts.scanned[PhaseResults]++
		if w.siblings != nil && typ.IsRegular() {
			if id, ok := cachefile.SandboxIDFromResultsName(name); ok {
				if v, ok := w.siblings.get(id); ok && w.sibling(dirfd, name, id, v) {
					return
				}
			}
		}
	}
	w.raw = nil
	re := ResultsEntry{Entry: Entry{Name: name}}
	var d Decision
	st, err := w.read(dirfd, name, typ, &re)
	switch {
	case errors.Is(err, unix.ENOENT):
		w.counts.vanished[PhaseResults]++ // removed by someone else meanwhile
		return
	case errors.Is(err, nofollow.ErrNotRegular):
		d = keep(ReasonNotRegular)
	case err != nil:
		w.e.warnFile("cannot read cache file", "phase", PhaseResults, "file", name, "error", err)
		d = keep(ReasonError)
		w.counts.errors++
	case re.ParseReason == "" && w.e.opts.Targets != nil && !w.e.opts.Targets.has(re.Cache.PodUID):
		// Another pod's file, since the name was found: the scheduled run
		// judges it, by the rules for pods not known dead.
		d = keep(ReasonNotTarget)
	default:
		d = w.planner.Results(re)
		if w.e.opts.Targets != nil {
			ids, n := re.sandboxes()
			for _, id := range ids[:n] {
				w.targeted[id] = struct{}{}
			}
		}
	}
	switch {
	case d.NeedsWitness && newer == nil:
		w.pending = append(w.pending, name)
		return
	case d.NeedsWitness:
		_, ok := newer[re.Cache.PodUID]
		d = w.planner.Witnessed(re.Entry, ok)
	case d.Reason == ReasonPodLive && re.Cache.PodUID != "":
		w.current[re.Cache.PodUID] = struct{}{}
	}
	if d.Remove {
		if w.e.opts.Release != nil {
			w.name, w.sandbox = name, re.Cache.ContainerID
			if _, ok := cachefile.ParseSandboxID(w.sandbox); !ok {
				// Without a containerId, the sandbox the name carries: two
				// files of one sandbox must not DEL at once either way.
				if id, ok := cachefile.SandboxIDFromResultsName(name); ok {
					w.sandbox = id.String()
				}
			}
		}
		d = w.remove(dirfd, name, st, d)
	}
	if d.Reason == reasonVanished {
		w.counts.vanished[PhaseResults]++
		return
	}
	if newer == nil {
		w.carryFrom(&re, d)
	}
	if !d.Remove {
		ids, n := re.sandboxes()
		for _, id := range ids[:n] {
			w.referenced[id] = struct{}{}
		}
	} else if w.e.opts.DryRun && w.e.opts.Release != nil {
		// A real run's DEL of this file releases the sandbox's
		// reservations itself, or fails and keeps the file: either way the
		// reservations' phase of a dry run must not count them as its own.
		w.e.dryRunNamed(re.Sandboxes())
	}
	if err == nil {
		w.left(st, d)
	}
	f := w.file(PhaseResults, name)
	f.ModTime = re.ModTime
	if err == nil && re.ParseReason == "" {
		f.Pod = PodRef{Namespace: re.Cache.PodNamespace, Name: re.Cache.PodName, UID: re.Cache.PodUID}
		f.Sandbox = re.Cache.ContainerID
	}
	w.record(f, d)
}

// reasonVanished marks a file that someone else removed between the plan and
// the removal: neither removed by the prune nor kept. Never counted by reason.
const reasonVanished Reason = "vanished"

// read opens name without following a symlink or blocking on a FIFO, checks
// that it is a regular file and parses it into re.
func (w *worker) read(dirfd int, name string, typ os.FileMode, re *ResultsEntry) (unix.Stat_t, error) {
	var st unix.Stat_t
	if !typ.IsRegular() {
		return st, nofollow.ErrNotRegular
	}
	// O_NOATIME spares an inode write per file.
	w.counts.opened++
	fd, err := nofollow.OpenRegular(dirfd, name, unix.O_NOATIME, &st)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	re.ModTime = time.Unix(st.Mtim.Unix())
	re.ChangeTime = time.Unix(st.Ctim.Unix())
	if st.Size > w.e.opts.MaxFileSize {
		re.ParseReason = ReasonTooLarge
		return st, nil
	}
	// Read what fstat saw, no more: a file that grows meanwhile has a newer
	// mtime, which the re-check before removal catches; one that shrinks
	// reads short and fails to parse, so it is kept.
	n, err := nofollow.ReadFull(fd, w.buf[:st.Size])
	if err != nil {
		return st, err
	}
	w.raw = w.buf[:n]
	cf, err := cachefile.ParseCacheFile(w.raw)
	switch {
	case errors.Is(err, cachefile.ErrNotCache):
		re.ParseReason = ReasonNotCache
	case errors.Is(err, cachefile.ErrConflict):
		re.ParseReason = ReasonConflicting
	case err != nil:
		re.ParseReason = ReasonUnparseable
	}
	re.Cache = cf
	return st, nil
}

func (w *worker) scratch(dirfd int, name string, typ os.FileMode, referenced map[SandboxID]struct{}) {
	id, ok := cachefile.ParseSandboxID(name)
	if !ok {
		if name != "results" {
			w.counts.scanned[PhaseOther]++
			w.record(w.file(PhaseOther, name), keep(ReasonOtherName))
		}
		return
	}
	w.counts.scanned[PhaseScratch]++
	// The name is the sandbox's ID: reporting it costs nothing.
	f := w.file(PhaseScratch, name)
	f.Sandbox = name
	if !typ.IsRegular() {
		w.record(f, keep(ReasonNotRegular))
		return
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			w.counts.vanished[PhaseScratch]++
			return
		}
		w.e.warnFile("cannot stat scratch file", "phase", PhaseScratch, "file", name, "error", err)
		w.counts.errors++
		w.record(f, keep(ReasonError))
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		w.record(f, keep(ReasonNotRegular))
		return
	}
	e := Entry{Name: name, ModTime: time.Unix(st.Mtim.Unix()), ChangeTime: time.Unix(st.Ctim.Unix())}
	f.ModTime = e.ModTime
	d := w.planner.Scratch(e, id, referenced)
	if d.Remove {
		// The lstat just taken is both the plan's and the re-check's.
		d = w.unlink(dirfd, name, d)
	}
	if d.Reason == reasonVanished {
		w.counts.vanished[PhaseScratch]++
		return
	}
	if !d.Remove {
		w.scratchKept[id] = struct{}{}
	}
	w.left(st, d)
	w.record(f, d)
}

// file returns the File of an entry of the worker's cache, for report.
func (w *worker) file(phase Phase, name string) File {
	return File{Cache: w.cache.name, CacheDir: w.cache.dir, Phase: phase, Name: name}
}

// left adds the disk space of a regular file, as the stat the run took
// anyway saw it, to the cache's bytes on disk when the run leaves the file
// there: kept, or in a dry run any.
func (w *worker) left(st unix.Stat_t, d Decision) {
	if !d.Remove || w.e.opts.DryRun {
		w.counts.diskBytes += st.Blocks * 512 // st_blocks counts 512-byte units, whatever the block size
	}
}

// record counts the outcome d of the file f and reports it.
func (w *worker) record(f File, d Decision) {
	if d.Remove {
		w.counts.removed[f.Phase]++
		w.counts.removedBy[d.Reason]++
	} else {
		w.counts.kept[d.Reason]++
	}
	w.report(f, d)
}

// report logs the outcome d of the file f and passes it to OnFile. A run's
// removals (a dry run's would-be removals) are its record of what went: the
// first maxRemovalLogs at info level, the rest, and every other outcome, at
// debug level.
func (w *worker) report(f File, d Decision) {
	e := w.e
	f.Remove, f.Reason, f.DryRun = d.Remove, d.Reason, e.opts.DryRun
	level := slog.LevelDebug
	if d.Remove && e.removals.Add(1) <= maxRemovalLogs {
		level = slog.LevelInfo
	}
	if level == slog.LevelInfo || e.debug {
		msg := "kept"
		switch {
		case d.Remove && e.opts.DryRun:
			msg = "would remove"
		case d.Remove:
			msg = "removed"
		}
		attrs := []slog.Attr{slog.String("cache", string(f.Cache)), slog.String("phase", string(f.Phase)), slog.String("file", f.Name),
			slog.String("reason", string(d.Reason))}
		if pod := f.PodName(); pod != "" {
			attrs = append(attrs, slog.String("pod", pod))
		}
		if f.Pod.UID != "" {
			attrs = append(attrs, slog.String("pod_uid", f.Pod.UID))
		}
		e.opts.Logger.LogAttrs(w.ctx, level, msg, attrs...)
	}
	if e.opts.OnFile == nil && e.opts.PodFiles == nil && e.opts.Targets == nil {
		return
	}
	if f.Sandbox == "" && f.Phase == PhaseResults {
		if id, ok := cachefile.SandboxIDFromResultsName(f.Name); ok {
			f.Sandbox = id.String()
		}
	}
	e.onFile.Lock()
	defer e.onFile.Unlock()
	if e.opts.PodFiles != nil {
		e.opts.PodFiles.Observe(f)
	}
	if e.opts.Targets != nil && f.Phase == PhaseResults {
		e.noteTarget(f)
	}
	if e.opts.OnFile != nil {
		e.opts.OnFile(f)
	}
}
