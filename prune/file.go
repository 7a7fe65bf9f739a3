package prune

import (
	"path/filepath"
	"time"
)

// PhaseOther is the phase of an entry of the cache directory that is
// neither a results nor a scratch file ("other" in Summary.Scanned).
const PhaseOther Phase = "other"

// File is what a run decided for one entry of the cache, as Deps.OnFile
// receives it: enough to say which file went or stayed, whose it was, and
// why, without the caller reading it again.
type File struct {
	// Cache is the cache directory the entry is in: CacheMultus or
	// CacheRuntime.
	Cache CacheName
	// CacheDir is that directory's path.
	CacheDir string
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

// RelPath returns the entry's path relative to its cache directory.
// A reservation's (PhaseReservation) is its full path, under its own
// data directory.
func (f File) RelPath() string {
	if f.Phase == PhaseResults && f.Cache != CacheRuntime {
		return "results/" + f.Name
	}
	return f.Name
}

// Path returns the entry's path as outputs show it: relative to the multus
// directory for an entry of the multus cache, which outputs name once, and
// whole for an entry of another cache, which lies elsewhere.
func (f File) Path() string {
	if f.Cache == CacheRuntime {
		return filepath.Join(f.CacheDir, f.Name)
	}
	return f.RelPath()
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

// CacheName names a cache directory that a run prunes. The strings are
// metric labels (cache).
type CacheName string

// The caches a run prunes.
const (
	// CacheMultus is multus's cache (Config.Dir): results/ and the
	// scratch files.
	CacheMultus CacheName = "multus"
	// CacheRuntime is the container runtime's own libcni cache
	// (Config.RuntimeDir): results files of the pods' primary network.
	CacheRuntime CacheName = "runtime"
)

// Phases returns the phases of a cache's files: the runtime's cache has
// results files only, multus's scratch files beside.
func (n CacheName) Phases() []Phase {
	if n == CacheRuntime {
		return []Phase{PhaseResults}
	}
	return []Phase{PhaseResults, PhaseScratch}
}

// Caches returns the caches a run with c prunes, in order: the metrics make
// each one's series ahead of any run.
func (c Config) Caches() []CacheName {
	var names []CacheName
	for _, cc := range c.caches() {
		names = append(names, cc.name)
	}
	return names
}

// cache is one directory of a run, with the rules of its layout.
type cache struct {
	name CacheName
	dir  string
	// flat: the directory holds the results files itself, and no scratch
	// files (the runtime's cache); otherwise results/ and scratch files
	// beside it (multus).
	flat bool
	// requirePodUID keeps a file that names no pod UID
	// (Planner.RequirePodUID).
	requirePodUID bool
}

// caches returns the directories of a run, in the order they are pruned.
// multus's comes first: with --cni-del, multus as the runtime's primary
// network then finds its own cache already pruned when the runtime's file
// replays its DEL, and releases nothing twice.
func (c Config) caches() []cache {
	cs := []cache{{name: CacheMultus, dir: c.Dir}}
	if c.RuntimeDir != "" {
		// The runtime's libcni cache also holds the files of containers
		// that are no pod's (nerdctl, podman, buildkit with CNI), which
		// neither view knows: a file must name its pod's UID.
		cs = append(cs, cache{name: CacheRuntime, dir: c.RuntimeDir, flat: true, requirePodUID: true})
	}
	return cs
}
