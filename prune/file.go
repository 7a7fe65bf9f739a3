package prune

import "time"

// PhaseOther is the phase of an entry of the cache directory that is
// neither a results nor a scratch file ("other" in Summary.Scanned).
const PhaseOther Phase = "other"

// File is what a run decided for one entry of the cache, as Options.OnFile
// receives it: enough to say which file went or stayed, whose it was, and
// why, without the caller reading it again.
type File struct {
	// Phase is PhaseResults for an entry of results/, PhaseScratch for a
	// scratch file, PhaseOther for any other entry of the cache directory.
	Phase Phase
	// Name is the entry's name in its directory (results/ for
	// PhaseResults); for PhaseReservation, its path.
	Name string
	// Pod is the pod the results file names (any of its fields may be
	// empty); zero for scratch files and for files that could not be read
	// or parsed. MirrorUID is never set.
	Pod PodRef
	// Sandbox is the sandbox the file belongs to (64 hex digits), from the
	// results file's content or, failing that, its name, or the scratch
	// file's name; empty when none is known.
	Sandbox string
	// ModTime is the file's mtime, by which its age is judged; zero when it
	// was not read (not a regular file, not ours, an error).
	ModTime time.Time
	// Remove is true for a file removed by the run or, in a dry run, one a
	// real run would remove.
	Remove bool
	// Reason is why it was removed or kept.
	Reason Reason
	// DryRun is true when the run removed nothing.
	DryRun bool
}

// RelPath returns the entry's path relative to the cache directory.
// A reservation's (PhaseReservation) is its full path, under its own
// data directory.
func (f File) RelPath() string {
	if f.Phase == PhaseResults {
		return "results/" + f.Name
	}
	return f.Name
}

// Action names what the run did with the file: "removed", "would-remove"
// (a dry run) or "kept".
func (f File) Action() string {
	switch {
	case !f.Remove:
		return "kept"
	case f.DryRun:
		return "would-remove"
	default:
		return "removed"
	}
}

// PodName returns the pod as namespace/name, the name alone when the file
// names no namespace, or "" when it names no pod name.
func (f File) PodName() string {
	switch {
	case f.Pod.Name == "":
		return ""
	case f.Pod.Namespace == "":
		return f.Pod.Name
	}
	return f.Pod.Namespace + "/" + f.Pod.Name
}
