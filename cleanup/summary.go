package cleanup

import (
	"fmt"
	"io"
	"sync"
)

// Outcome is what happened to one file or object.
type Outcome string

// Outcomes recorded in a Summary.
const (
	Deleted Outcome = "deleted"
	// Collected is an object owned by one the run deleted: the garbage
	// collector deletes it after the run, which does not wait for that.
	Collected   Outcome = "collected"
	WouldDelete Outcome = "would-delete"
	Skipped     Outcome = "skipped"
	Failed      Outcome = "failed"
)

// Phase is the part of the cleanup a record belongs to.
type Phase string

// Phases of a run, in order.
const (
	PhaseFile     Phase = "file"
	PhaseResource Phase = "resource"
	PhaseSelf     Phase = "self"
)

// Record is one line of the summary.
type Record struct {
	Phase   Phase
	Object  string
	Outcome Outcome
	// Reason says why an object was skipped or failed.
	Reason string
	// MustDelete is set on failures that fail the run.
	MustDelete bool
}

// Summary collects what a run deleted, skipped and failed. It is safe for
// concurrent use; the daemon turns it into metrics, the command prints it.
type Summary struct {
	mu      sync.Mutex
	records []Record
}

// Add appends r. The deletion functions add their own records; a caller
// adds one for what it decided not to do (a skipped self-cleanup).
func (s *Summary) Add(r Record) {
	s.mu.Lock()
	s.records = append(s.records, r)
	s.mu.Unlock()
}

// Records returns a copy of the records in the order they were added.
func (s *Summary) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// Count returns how many records of phase have outcome o; an empty phase
// counts all phases.
func (s *Summary) Count(phase Phase, o Outcome) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.records {
		if r.Outcome == o && (phase == "" || r.Phase == phase) {
			n++
		}
	}
	return n
}

// MustFailed reports whether a mustDelete entry or the self-cleanup failed,
// which makes the run fail (exit 1).
func (s *Summary) MustFailed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		if r.Outcome == Failed && r.MustDelete {
			return true
		}
	}
	return false
}

// WriteText writes a human-readable summary: one line of counts, then one
// line per record.
func (s *Summary) WriteText(w io.Writer) error {
	recs := s.Records()
	counts := map[Outcome]int{}
	for _, r := range recs {
		counts[r.Outcome]++
	}
	if _, err := fmt.Fprintf(w, "cleanup summary: deleted=%d collected=%d would-delete=%d skipped=%d failed=%d\n",
		counts[Deleted], counts[Collected], counts[WouldDelete], counts[Skipped], counts[Failed]); err != nil {
		return err
	}
	for _, r := range recs {
		line := fmt.Sprintf("%-12s %-8s %s", r.Outcome, r.Phase, r.Object)
		if r.Reason != "" {
			line += " (" + r.Reason + ")"
		}
		if r.Outcome == Failed && r.MustDelete {
			line += " [must delete]"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
