package prune

import (
	"encoding/json"
	"fmt"
	"io"
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
}

func newCounts() counts {
	return counts{scanned: map[Phase]int{}, removed: map[Phase]int{}, removedBy: map[Reason]int{},
		kept: map[Reason]int{}, vanished: map[Phase]int{}}
}

// Summary is what one prune did.
type Summary struct {
	Dir    string `json:"dir"`
	DryRun bool   `json:"dryRun"`
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
	// CNIDel counts the CNI DELs run before removals; nil unless the run
	// had a Releaser (--cni-del).
	CNIDel *CNIDelCounts `json:"cniDel,omitempty"`
	// AgesTrustedFrom is when the clock guard (Options.Clock) stops holding
	// files back: until then files old by the wall clock are kept as
	// clock-unsettled, because the node booted or its clock was set forward
	// within the minimum age. Zero when it held nothing back.
	AgesTrustedFrom time.Time `json:"agesTrustedFrom,omitzero"`
	// Reservations is what the run did with host-local's reservations; nil
	// unless it was asked to release them (Options.HostLocalDirs).
	Reservations *ReservationCounts `json:"reservations,omitempty"`
	Duration     time.Duration      `json:"-"`

	// kept holds the sandboxes named by the results files left after a run
	// that read all of them; nil otherwise.
	kept map[SandboxID]struct{}
}

// CNIDelCounts counts the CNI DELs of a run. Attempted is Succeeded plus
// Failed; in a dry run it counts the DELs a real run would attempt (after the
// cap), and nothing succeeds or fails.
type CNIDelCounts struct {
	Attempted int `json:"attempted"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

func newSummary(dir string, dryRun, cniDel bool) *Summary {
	c := newCounts()
	s := &Summary{Dir: dir, DryRun: dryRun, Scanned: c.scanned, Removed: c.removed, RemovedBy: c.removedBy, Kept: c.kept,
		Vanished: c.vanished}
	if cniDel {
		s.CNIDel = &CNIDelCounts{}
	}
	return s
}

func (s *Summary) add(c *counts) {
	for k, v := range c.scanned {
		s.Scanned[k] += v
	}
	for k, v := range c.removed {
		s.Removed[k] += v
	}
	for k, v := range c.removedBy {
		s.RemovedBy[k] += v
	}
	for k, v := range c.kept {
		s.Kept[k] += v
	}
	for k, v := range c.vanished {
		s.Vanished[k] += v
	}
	s.Errors += c.errors
	if s.CNIDel != nil {
		s.CNIDel.Attempted += c.cniDel.Attempted
		s.CNIDel.Succeeded += c.cniDel.Succeeded
		s.CNIDel.Failed += c.cniDel.Failed
	}
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
	_, err := fmt.Fprintf(w, "%s: scanned %d results, %d scratch, %d other; %s %d results, %d scratch; %s; %.3fs\n",
		s.Dir, s.Scanned[PhaseResults], s.Scanned[PhaseScratch], s.Scanned["other"],
		verb, s.Removed[PhaseResults], s.Removed[PhaseScratch], outcome, s.Duration.Seconds())
	if err != nil {
		return err
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
