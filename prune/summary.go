package prune

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"time"
)

// counts is what one worker saw; Summary adds them up.
type counts struct {
	// scanned counts entries by phase; "other" counts entries of the cache
	// directory that are neither.
	scanned   map[Phase]int
	removed   map[Phase]int
	removedBy map[Reason]int
	kept      map[Reason]int
	vanished  map[Phase]int
	errors    int
	cniDel    CNIDelCounts
	// diskBytes is the disk space of the regular files left (File.left).
	diskBytes int64
	// opened counts the results files opened; carried, those decided by
	// a sibling's verdict without being opened (worker.sibling).
	opened, carried int
}

func newCounts() counts {
	return counts{scanned: map[Phase]int{}, removed: map[Phase]int{}, removedBy: map[Reason]int{},
		kept: map[Reason]int{}, vanished: map[Phase]int{}}
}

// FileCounts counts what a run did with the files of the caches, of one
// cache directory (CacheSummary) or of all (Summary).
type FileCounts struct {
	// Scanned counts the entries looked at: "results", "scratch" and "other"
	// (entries of the cache directory that are neither).
	Scanned map[Phase]int `json:"scanned"`
	// Removed counts removals (in a dry run: would-be removals) by phase.
	Removed map[Phase]int `json:"removed"`
	// RemovedBy counts the same removals by reason.
	RemovedBy map[Reason]int `json:"removedBy"`
	// Kept counts kept files by reason.
	Kept map[Reason]int `json:"kept"`
	// Vanished counts files, by phase, that someone else removed between
	// the scan and the removal: not the prune's work.
	Vanished map[Phase]int `json:"vanished"`
	// Errors counts files that could not be read, checked or removed.
	Errors int `json:"errors"`
}

func newFileCounts() FileCounts {
	return FileCounts{Scanned: map[Phase]int{}, Removed: map[Phase]int{}, RemovedBy: map[Reason]int{},
		Kept: map[Reason]int{}, Vanished: map[Phase]int{}}
}

// add adds a worker's counts.
func (f *FileCounts) add(c *counts) {
	for k, v := range c.scanned {
		f.Scanned[k] += v
	}
	for k, v := range c.removed {
		f.Removed[k] += v
	}
	for k, v := range c.removedBy {
		f.RemovedBy[k] += v
	}
	for k, v := range c.kept {
		f.Kept[k] += v
	}
	for k, v := range c.vanished {
		f.Vanished[k] += v
	}
	f.Errors += c.errors
}

// Summary is what one prune did.
type Summary struct {
	Dir    string `json:"dir"`
	DryRun bool   `json:"dryRun"`
	FileCounts
	// CNIDel counts the CNI DELs run before removals; nil unless the run
	// had a Releaser (--cni-del).
	CNIDel *CNIDelCounts `json:"cniDel,omitempty"`
	// AgesTrustedFrom is when the clock guard (Views.Clock) stops holding
	// files back: until then files old by the wall clock are kept as
	// clock-unsettled, because the node booted, was suspended or had its
	// clock set forward within the minimum age. Zero when it held nothing
	// back.
	AgesTrustedFrom time.Time `json:"agesTrustedFrom,omitzero"`
	// Caches counts the same by cache directory, in the order the run
	// pruned them (CacheMultus first); a cache the run did not reach is
	// not in it.
	Caches []*CacheSummary `json:"caches,omitempty"`
	// Reservations is what the run did with host-local's reservations; nil
	// unless it was asked to release them (Config.HostLocalDirs).
	Reservations *ReservationCounts `json:"reservations,omitempty"`
	// Targeted is what a targeted run (Options.Targets) did pod by pod;
	// nil for a full run.
	Targeted *TargetedCounts `json:"targeted,omitempty"`
	Duration time.Duration   `json:"-"`

	// kept holds the sandboxes named by the results files left after a run
	// that read all of them; nil otherwise.
	kept map[SandboxID]struct{}
	// opened and carried are the workers' counts of the same names, for
	// tests and profiles: what the run read, and what it decided unread.
	opened, carried int
}

// CacheSummary is what one run did in one cache directory: Summary's
// counts of its files.
type CacheSummary struct {
	Name CacheName `json:"name"`
	Dir  string    `json:"dir"`
	FileCounts
	// DiskBytes is the disk space (allocated blocks) of the results and
	// scratch files left in the directory after the run (in a dry run,
	// all of them), as the run's own stat of each saw it. Entries it did
	// not stat (not regular, unreadable) are not in it.
	DiskBytes int64 `json:"diskBytes"`
}

// Remaining returns how many files of a phase are left in the cache after
// the run.
func (c *CacheSummary) Remaining(p Phase, dryRun bool) int {
	if dryRun {
		return c.Scanned[p] - c.Vanished[p]
	}
	return c.Scanned[p] - c.Removed[p] - c.Vanished[p]
}

// CNIDelCounts counts the CNI DELs of a run. Attempted is Succeeded plus
// Failed; in a dry run it counts the DELs a real run would attempt (after the
// cap), and nothing succeeds or fails.
type CNIDelCounts struct {
	Attempted int `json:"attempted"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// HeldSeconds is how long the DELs waited for Deps.ReleaseGate:
	// for pods that started on the node meanwhile.
	HeldSeconds float64 `json:"heldSeconds,omitempty"`
}

func newSummary(dir string, dryRun, cniDel bool) *Summary {
	s := &Summary{Dir: dir, DryRun: dryRun, FileCounts: newFileCounts()}
	if cniDel {
		s.CNIDel = &CNIDelCounts{}
	}
	return s
}

// startCache starts the counts of a cache directory: add counts into it
// from then on.
func (s *Summary) startCache(name CacheName, dir string) {
	s.Caches = append(s.Caches, &CacheSummary{Name: name, Dir: dir, FileCounts: newFileCounts()})
}

// add adds a worker's counts to the totals and to those of the cache it
// worked in, the last one started.
func (s *Summary) add(c *counts) {
	s.FileCounts.add(c)
	s.opened += c.opened
	s.carried += c.carried
	if n := len(s.Caches); n > 0 {
		cs := s.Caches[n-1]
		cs.add(c)
		cs.DiskBytes += c.diskBytes
	}
	if s.CNIDel != nil {
		s.CNIDel.Attempted += c.cniDel.Attempted
		s.CNIDel.Succeeded += c.cniDel.Succeeded
		s.CNIDel.Failed += c.cniDel.Failed
	}
}

// Cache returns the counts of the cache name, or nil when the run did not
// reach it.
func (s *Summary) Cache(name CacheName) *CacheSummary {
	for _, c := range s.Caches {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// KeptSandboxes returns the sandboxes that the results files kept by the run
// name, or nil when the run did not read every results file (it stopped, or
// the results directory could not be read). In a dry run, files that would
// be removed are not in it. The caller must not modify the set.
func (s *Summary) KeptSandboxes() map[SandboxID]struct{} { return s.kept }

// Remaining returns how many files of a phase are left after the run.
func (s *Summary) Remaining(p Phase) int {
	if s.DryRun {
		return s.Scanned[p] - s.Vanished[p]
	}
	return s.Scanned[p] - s.Removed[p] - s.Vanished[p]
}

// MarshalJSON adds the duration in seconds.
func (s *Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	return json.Marshal(struct {
		*plain
		DurationSeconds float64 `json:"durationSeconds"`
	}{(*plain)(s), s.Duration.Seconds()})
}

// WriteText writes a short human-readable report of a run that completed.
func (s *Summary) WriteText(w io.Writer) error { return s.WriteTextResult(w, nil) }

// WriteTextResult writes a short human-readable report of a run that ended
// with runErr (Run's error). A run that stopped before the end says so and
// why in place of its error count, which alone would read as all well.
func (s *Summary) WriteTextResult(w io.Writer, runErr error) error {
	verb := "removed"
	if s.DryRun {
		verb = "would remove"
	}
	outcome := fmt.Sprintf("%d errors", s.Errors)
	if runErr != nil {
		outcome = "incomplete: " + runErr.Error()
		if s.Errors > 0 {
			outcome = fmt.Sprintf("%d errors; %s", s.Errors, outcome)
		}
	}
	// The first line is multus's cache and the run's outcome; each other
	// cache has a line of its own, the counts by reason below are the
	// run's.
	scanned, removed := s.Scanned, s.Removed
	if c := s.Cache(CacheMultus); c != nil && len(s.Caches) > 1 {
		scanned, removed = c.Scanned, c.Removed
	}
	_, err := fmt.Fprintf(w, "%s: scanned %d results, %d scratch, %d other; %s %d results, %d scratch; %s; %.3fs\n",
		s.Dir, scanned[PhaseResults], scanned[PhaseScratch], scanned[PhaseOther],
		verb, removed[PhaseResults], removed[PhaseScratch], outcome, s.Duration.Seconds())
	if err != nil {
		return err
	}
	for _, c := range s.Caches {
		if c.Name == CacheMultus {
			continue
		}
		if _, err := fmt.Fprintf(w, "  %s cache %s: scanned %d results; %s %d results\n",
			c.Name, c.Dir, c.Scanned[PhaseResults], verb, c.Removed[PhaseResults]); err != nil {
			return err
		}
	}
	if !s.AgesTrustedFrom.IsZero() {
		// The zone too: the reader may be in another one than the node.
		if _, err := fmt.Fprintf(w, "  ages are trusted from %s: until then old files are kept as %s\n",
			s.AgesTrustedFrom.Format("15:04:05 MST"), ReasonClockUnsettled); err != nil {
			return err
		}
	}
	if n := s.Vanished[PhaseResults] + s.Vanished[PhaseScratch]; n > 0 {
		if _, err := fmt.Fprintf(w, "  vanished (removed by someone else meanwhile) %d\n", n); err != nil {
			return err
		}
	}
	if d := s.CNIDel; d != nil {
		if s.DryRun {
			_, err = fmt.Fprintf(w, "  cni del: would run %d\n", d.Attempted)
		} else {
			_, err = fmt.Fprintf(w, "  cni del: %d attempted, %d succeeded, %d failed\n", d.Attempted, d.Succeeded, d.Failed)
		}
		if err != nil {
			return err
		}
	}
	for _, by := range []struct {
		verb string
		m    map[Reason]int
	}{{verb, s.RemovedBy}, {"kept", s.Kept}} {
		reasons := make([]string, 0, len(by.m))
		for r := range by.m {
			reasons = append(reasons, string(r))
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			if _, err := fmt.Fprintf(w, "  %-*s %-20s %d\n", len(verb), by.verb, r, by.m[Reason(r)]); err != nil {
				return err
			}
		}
	}
	if r := s.Reservations; r != nil {
		return r.writeText(w, s.DryRun)
	}
	return nil
}

// writeText writes the reservations' line of a run's report, then their
// counts by reason.
func (r *ReservationCounts) writeText(w io.Writer, dryRun bool) error {
	verb := "released"
	if dryRun {
		verb = "would release"
	}
	if _, err := fmt.Fprintf(w, "  host-local reservations: scanned %d; %s %d; %d errors\n", r.Scanned, verb, r.Released, r.Errors); err != nil {
		return err
	}
	if r.Vanished > 0 {
		if _, err := fmt.Fprintf(w, "    vanished (released by someone else meanwhile) %d\n", r.Vanished); err != nil {
			return err
		}
	}
	reasons := make([]string, 0, len(r.Kept))
	for k := range r.Kept {
		reasons = append(reasons, string(k))
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		if _, err := fmt.Fprintf(w, "    kept %-20s %d\n", k, r.Kept[Reason(k)]); err != nil {
			return err
		}
	}
	return nil
}

// LogAttrs are the log attributes of the summary, for the daemon's line of
// each run and of each check of deleted pods. Counts by phase
// or reason are groups keyed by the phase or reason (kept.pod-live=3), so
// that every key is one of a fixed set; a dry run says would_remove where
// a real run says removed.
func (s *Summary) LogAttrs() []any {
	removed := "removed"
	if s.DryRun {
		removed = "would_remove"
	}
	attrs := []any{
		"dry_run", s.DryRun,
		slog.Group("scanned", "results", s.Scanned[PhaseResults], "scratch", s.Scanned[PhaseScratch],
			"other", s.Scanned[PhaseOther]),
		slog.Group(removed, "results", s.Removed[PhaseResults], "scratch", s.Removed[PhaseScratch]),
		reasonGroup(removed+"_by", s.RemovedBy),
		reasonGroup("kept", s.Kept),
		"vanished", s.Vanished[PhaseResults] + s.Vanished[PhaseScratch],
		"errors", s.Errors, "duration_seconds", s.Duration.Seconds(),
	}
	if c := s.CNIDel; c != nil && s.DryRun {
		attrs = append(attrs, slog.Group("cni_del", "would_run", c.Attempted))
	} else if c != nil {
		attrs = append(attrs, slog.Group("cni_del", "attempted", c.Attempted, "succeeded", c.Succeeded, "failed", c.Failed))
	}
	if r := s.Reservations; r != nil {
		released := "released"
		if s.DryRun {
			released = "would_release"
		}
		attrs = append(attrs, slog.Group("host_local", "scanned", r.Scanned, released, r.Released,
			reasonGroup("kept", r.Kept), "vanished", r.Vanished, "errors", r.Errors))
	}
	if !s.AgesTrustedFrom.IsZero() {
		attrs = append(attrs, "ages_trusted_from", s.AgesTrustedFrom)
	}
	// The counts above are the run's; each cache but multus's, the first
	// and usually the only one, adds its own.
	for _, c := range s.Caches {
		if c.Name != CacheMultus {
			attrs = append(attrs, slog.Group(string(c.Name)+"_cache", "scanned", c.Scanned[PhaseResults],
				removed, c.Removed[PhaseResults], "errors", c.Errors, "disk_bytes", c.DiskBytes))
		}
	}
	return attrs
}

// reasonGroup is a group of the counts of m by reason, in order, so that log
// lines are stable.
func reasonGroup(name string, m map[Reason]int) slog.Attr {
	args := make([]any, 0, 2*len(m))
	for _, r := range sortedReasons(m) {
		args = append(args, string(r), m[r])
	}
	return slog.Group(name, args...)
}

// sortedReasons returns the keys of m in order, so that log lines are
// stable.
func sortedReasons(m map[Reason]int) []Reason {
	rs := make([]Reason, 0, len(m))
	for r := range m {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}
