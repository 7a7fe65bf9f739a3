// Package prune removes stale multus CNI cache files in two phases.
//
// Phase 1 removes results files (`<dir>/results/<net>-<sandbox>-<if>`) whose
// pod no longer exists on this node; phase 2 removes scratch netconf files
// (`<dir>/<sandbox>`) that no results file names any more. The planner decides
// (a pure function of one entry, the pod index, the clock and the options);
// the executor only carries decisions out after re-checking the entry. The
// package imports no client-go: the pod index is an interface.
package prune

import "time"

// PodIndex is the node's view of its pods.
type PodIndex interface {
	// Synced reports whether the view is complete and fresh. The executor
	// checks it before every removal and stops when it turns false.
	Synced() bool
	// HasUID reports whether a pod with this UID exists on the node.
	HasUID(uid string) bool
	// HasName reports whether a pod with this namespace and name exists on
	// the node. Used only for files that carry no UID.
	HasName(namespace, name string) bool
}

// Phase names the two kinds of cache files. The strings are metric labels.
type Phase string

// The phases of a prune.
const (
	PhaseResults Phase = "results"
	PhaseScratch Phase = "scratch"
)

// Reason says why a file is removed or kept. The set is closed, so it can be a
// metric label.
type Reason string

// Reasons to remove.
const (
	// ReasonPodGone: the file's pod UID is not on the node.
	ReasonPodGone Reason = "pod-gone"
	// ReasonPodNameGone: the file has no UID and no pod of its
	// namespace/name is on the node.
	ReasonPodNameGone Reason = "pod-name-gone"
	// ReasonOrphanScratch: no results file names the scratch file's sandbox.
	ReasonOrphanScratch Reason = "orphan-scratch"
)

// Reasons to keep.
const (
	// ReasonPodLive: the pod still exists.
	ReasonPodLive Reason = "pod-live"
	// ReasonTooYoung: newer than the minimum age; its ADD may be under way.
	ReasonTooYoung Reason = "too-young"
	// ReasonSandboxReferenced: a remaining results file names the sandbox.
	ReasonSandboxReferenced Reason = "sandbox-referenced"
	// ReasonUnparseable: not one well-formed JSON object (truncated, corrupt).
	ReasonUnparseable Reason = "unparseable"
	// ReasonNotCache: JSON, but not a cniCacheV1 file (pre-2019 bare results).
	ReasonNotCache Reason = "not-cache"
	// ReasonNoIdentity: a cache file that names no pod UID, namespace or name.
	ReasonNoIdentity Reason = "no-identity"
	// ReasonTooLarge: bigger than any cache file; not read.
	ReasonTooLarge Reason = "too-large"
	// ReasonNotRegular: a symlink, directory, socket or other non-file in
	// results/ or a non-file with a sandbox name; never followed or touched.
	ReasonNotRegular Reason = "not-regular"
	// ReasonOtherName: an entry of the multus directory that is not a
	// scratch file; not ours.
	ReasonOtherName Reason = "other-name"
	// ReasonChanged: the file changed between planning and removal.
	ReasonChanged Reason = "changed"
	// ReasonError: it could not be read or removed; counted as an error.
	ReasonError Reason = "error"
	// ReasonCNIDelFailed: CNI DEL of its attachment failed (Options.Release);
	// counted as an error and tried again next run.
	ReasonCNIDelFailed Reason = "cni-del-failed"
	// ReasonCNIDelDeferred: to be removed, but the run reached its cap of CNI
	// DELs (Options.MaxReleases); a later run removes it.
	ReasonCNIDelDeferred Reason = "cni-del-deferred"
)

// Decision is the planner's verdict on one file.
type Decision struct {
	Remove bool
	Reason Reason
}

func keep(r Reason) Decision   { return Decision{Reason: r} }
func remove(r Reason) Decision { return Decision{Remove: true, Reason: r} }

// Entry is one regular file as the executor saw it.
type Entry struct {
	Name    string
	ModTime time.Time
}

// ResultsEntry is a results file with the outcome of parsing it.
type ResultsEntry struct {
	Entry
	// Cache is the parsed identity; valid only when ParseReason is empty.
	Cache CacheFile
	// ParseReason is ReasonUnparseable, ReasonNotCache or ReasonTooLarge
	// when the content could not give an identity.
	ParseReason Reason
}

// Planner decides file by file. It is deterministic: the same entries, index,
// clock and options always give the same decisions.
type Planner struct {
	Index  PodIndex
	Now    time.Time
	MinAge time.Duration
}

// old reports whether e is past the minimum age. A file from the future (a
// clock step back) is young: keeping it is the safe side.
func (p Planner) old(e Entry) bool {
	return !e.ModTime.After(p.Now.Add(-p.MinAge))
}

// Results decides a results file (phase 1).
func (p Planner) Results(e ResultsEntry) Decision {
	if e.ParseReason != "" {
		return keep(e.ParseReason)
	}
	var live bool
	gone := ReasonPodGone
	switch c := e.Cache; {
	case c.PodUID != "":
		live = p.Index.HasUID(c.PodUID)
	case c.PodNamespace != "" && c.PodName != "":
		live, gone = p.Index.HasName(c.PodNamespace, c.PodName), ReasonPodNameGone
	default:
		return keep(ReasonNoIdentity)
	}
	if live {
		return keep(ReasonPodLive)
	}
	if !p.old(e.Entry) {
		return keep(ReasonTooYoung)
	}
	return remove(gone)
}

// Sandboxes returns the sandboxes a results file names: the ID in its file
// name and its containerId. A file that stays names them for phase 2.
func (e ResultsEntry) Sandboxes() []SandboxID {
	var ids []SandboxID
	if id, ok := SandboxIDFromResultsName(e.Name); ok {
		ids = append(ids, id)
	}
	if e.ParseReason == "" {
		if id, ok := ParseSandboxID(e.Cache.ContainerID); ok && (len(ids) == 0 || ids[0] != id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Scratch decides a scratch file (phase 2) given the set of sandboxes that
// the remaining results files name. Its content is never consulted: a
// zero-length or corrupt scratch file is judged by its name alone.
func (p Planner) Scratch(e Entry, id SandboxID, referenced map[SandboxID]struct{}) Decision {
	if _, ok := referenced[id]; ok {
		return keep(ReasonSandboxReferenced)
	}
	if !p.old(e) {
		return keep(ReasonTooYoung)
	}
	return remove(ReasonOrphanScratch)
}

// PodRef identifies a pod.
type PodRef struct {
	Namespace, Name, UID string
}

// PodSet is a PodIndex over a fixed list of pods, for one-shot prunes and
// tests. It is always synced.
type PodSet struct {
	uids  map[string]struct{}
	names map[[2]string]struct{}
}

// NewPodSet indexes pods.
func NewPodSet(pods []PodRef) *PodSet {
	s := &PodSet{uids: make(map[string]struct{}, len(pods)), names: make(map[[2]string]struct{}, len(pods))}
	for _, p := range pods {
		s.uids[p.UID] = struct{}{}
		s.names[[2]string{p.Namespace, p.Name}] = struct{}{}
	}
	return s
}

// Synced is always true: the list is complete by construction.
func (s *PodSet) Synced() bool { return true }

// HasUID implements PodIndex.
func (s *PodSet) HasUID(uid string) bool { _, ok := s.uids[uid]; return ok }

// HasName implements PodIndex.
func (s *PodSet) HasName(namespace, name string) bool {
	_, ok := s.names[[2]string{namespace, name}]
	return ok
}
