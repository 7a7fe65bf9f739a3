package prune

import (
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
)

// PodIndex is the node's view of its pods.
type PodIndex interface {
	// Synced reports whether the view is complete and fresh. The executor
	// checks it before every removal and stops when it turns false.
	Synced() bool
	// HasUID reports whether a pod with this UID exists on the node. A
	// static pod's UID is the one the kubelet gave the runtime (the manifest
	// hash), which the API server keeps in its mirror pod's
	// kubernetes.io/config.mirror annotation: the index must know both.
	HasUID(uid string) bool
	// HasName reports whether a pod with this namespace and name exists on
	// the node. Used only for files that carry no UID.
	HasName(namespace, name string) bool
}

// MirrorHistory is implemented by a PodIndex that remembers the mirror pods
// it has seen: evidence that a UID is a static pod's after its mirror pod is
// gone.
type MirrorHistory interface {
	// SeenMirror reports whether a mirror pod named uid as its static
	// pod's UID (kubernetes.io/config.mirror) while the view followed the
	// API server.
	SeenMirror(uid string) bool
}

// SandboxIndex is the container runtime's view of the node's pod sandboxes
// (CRI ListPodSandbox), for sandbox liveness.
type SandboxIndex interface {
	// Synced reports whether the view is complete. The executor checks it
	// before every removal, as for PodIndex.
	Synced() bool
	// Has reports whether the runtime knows the sandbox, in any state: a
	// NOTREADY sandbox is still the runtime's, and so is its CNI DEL.
	Has(id SandboxID) bool
}

// BootRecord knows which sandboxes were seen under an earlier boot of the
// node. Sandboxes and their network namespaces never survive a reboot, so
// their cache files are stale whatever the API server says of their pods.
type BootRecord interface {
	// EarlierBoot reports whether id was recorded under a boot that is not
	// the current one.
	EarlierBoot(id SandboxID) bool
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
	// ReasonSandboxGone: the container runtime no longer knows the file's
	// sandbox (sandbox liveness alone).
	ReasonSandboxGone Reason = "sandbox-gone"
	// ReasonEarlierBoot: the file's sandbox was recorded under an earlier
	// boot of the node, and a second witness agrees that it is dead: the
	// container runtime does not know it, or (pod liveness alone) its pod
	// already has a sandbox of the current boot in the cache.
	ReasonEarlierBoot Reason = "earlier-boot"
)

// Reasons to keep.
const (
	// ReasonPodLive: the pod still exists.
	ReasonPodLive Reason = "pod-live"
	// ReasonSandboxLive: the container runtime still knows the sandbox, in
	// any state. It wins over every reason to remove.
	ReasonSandboxLive Reason = "sandbox-live"
	// ReasonTooYoung: newer than the minimum age; its ADD may be under way.
	ReasonTooYoung Reason = "too-young"
	// ReasonSandboxReferenced: a remaining results file names the sandbox.
	ReasonSandboxReferenced Reason = "sandbox-referenced"
	// ReasonUnparseable: not one well-formed JSON object (truncated, corrupt).
	ReasonUnparseable Reason = "unparseable"
	// ReasonNotCache: JSON, but not a cniCacheV1 file (pre-2019 bare results).
	ReasonNotCache Reason = "not-cache"
	// ReasonNoIdentity: a cache file that names no pod UID, namespace or
	// name (pod liveness), or no sandbox (sandbox liveness).
	ReasonNoIdentity Reason = "no-identity"
	// ReasonTooLarge: bigger than any cache file; not read.
	ReasonTooLarge Reason = "too-large"
	// ReasonNotRegular: a symlink, directory, socket or other non-file in
	// results/ or a non-file with a sandbox name; never followed or touched.
	ReasonNotRegular Reason = "not-regular"
	// ReasonOtherName: an entry of the multus directory that is not a
	// scratch file; not ours.
	ReasonOtherName Reason = "other-name"
	// ReasonStaticPod: the file's pod UID is not an API server UID and no
	// mirror pod names it: a static pod whose mirror pod is missing (kubelet
	// cut off from the API server, mirror refused by admission) looks
	// exactly like this, so the API server cannot vouch for its death.
	ReasonStaticPod Reason = "static-pod"
	// ReasonNewerThanView: the file changed after the liveness view it
	// would be judged by was taken; the next run's view knows its sandbox.
	ReasonNewerThanView Reason = "newer-than-view"
	// ReasonClockUnsettled: old by the wall clock, but not by more than the
	// forward steps of the clock within the last minimum age (sets, and
	// suspends: the wall clock runs on while an ADD is frozen), or the node
	// has been awake for less than the minimum age since boot, so the age
	// cannot be trusted.
	ReasonClockUnsettled Reason = "clock-unsettled"
	// ReasonNoResultsDir: a scratch file in a cache without results/
	// (multus before v3.7.2 kept delegate results elsewhere): nothing here
	// says whether its sandbox is still in use.
	ReasonNoResultsDir Reason = "no-results-dir"
	// ReasonConflicting: the file names its pod or sandbox twice with
	// different values (or with keys that differ only in case), so readers
	// could disagree on whose it is.
	ReasonConflicting Reason = "conflicting-identity"
	// ReasonViewStale: to be removed, but the run stopped because a liveness
	// view went stale; a later run decides again.
	ReasonViewStale Reason = "view-stale"
	// ReasonPaused: to be removed, but the run stopped because the node's
	// prune was paused (Deps.Paused: the Node's pause annotation); the run
	// after the pause removes it.
	ReasonPaused Reason = "paused"
	// ReasonNotTarget: a check of deleted pods (Options.Targets) found the
	// file naming another pod than those it checks; the scheduled run
	// judges it.
	ReasonNotTarget Reason = "not-target"
	// ReasonChanged: the file changed between planning and removal.
	ReasonChanged Reason = "changed"
	// ReasonError: it could not be read or removed; counted as an error.
	ReasonError Reason = "error"
	// ReasonCNIDelFailed: CNI DEL of its attachment failed (Deps.Release);
	// counted as an error and tried again next run.
	ReasonCNIDelFailed Reason = "cni-del-failed"
	// ReasonCNIDelDeferred: to be removed, but the run reached its cap of CNI
	// DELs (Config.MaxReleases); a later run removes it.
	ReasonCNIDelDeferred Reason = "cni-del-deferred"
)

// Decision is the planner's verdict on one file.
type Decision struct {
	Remove bool
	Reason Reason
	// NeedsWitness marks a file kept for now whose sandbox is from an
	// earlier boot; Planner.Witnessed decides it after phase 1.
	NeedsWitness bool
}

func keep(r Reason) Decision   { return Decision{Reason: r} }
func remove(r Reason) Decision { return Decision{Remove: true, Reason: r} }

// Entry is one regular file as the executor saw it.
type Entry struct {
	Name    string
	ModTime time.Time
	// ChangeTime is the inode's ctime: when the file was created or last
	// changed. Unlike the mtime it cannot be set by a user.
	ChangeTime time.Time
}

// ResultsEntry is a results file with the outcome of parsing it.
type ResultsEntry struct {
	Entry
	// Cache is the parsed identity; valid only when ParseReason is empty.
	Cache cachefile.CacheFile
	// ParseReason is ReasonUnparseable, ReasonNotCache, ReasonTooLarge or
	// ReasonConflicting when the content could not give one identity.
	ParseReason Reason
}

// Planner decides file by file. It is deterministic: the same entries, views,
// clock and options always give the same decisions.
//
// Liveness comes from Index (the pods, from the API server), Sandboxes (the
// sandboxes, from the container runtime) or both; at least one is set. With
// both, a file goes only when both say it is dead. Boot, when set, makes the
// files of sandboxes recorded under an earlier boot stale even when their pod
// is live, but only with a second witness: the runtime does not know the
// sandbox, or (pods alone) the pod has a sandbox of the current boot.
type Planner struct {
	Index     PodIndex     // nil: no pod liveness
	Sandboxes SandboxIndex // nil: no sandbox liveness
	// Mirrors, when set, remembers the static pod UIDs that mirror pods
	// have named (Index, when it keeps such a memory).
	Mirrors MirrorHistory
	Boot    BootRecord // nil: not reboot-aware
	// NodeName is this node; a static pod's name ends in "-<node>".
	NodeName string
	Now      time.Time
	MinAge   time.Duration
	// RequirePodUID keeps a results file that names no pod UID as
	// ReasonNoIdentity, whatever the liveness: in the runtime's libcni
	// cache such a file can be a container's that the CRI never lists and
	// the API server never knew (nerdctl; podman's CNI backend names its
	// containers as pods, without a UID), whose death neither view proves.
	// The runtimes name the UID of every pod sandbox (containerd 1.6,
	// CRI-O).
	RequirePodUID bool
	// Clock is what the ClockGuard knows for MinAge: ages are trusted only
	// once the node has been awake for MinAge, and only beyond MinAge plus
	// the forward steps (sets and suspends) of the last MinAge it was
	// awake. The zero value trusts no age.
	Clock ClockState
	// ViewTime, when set, is when the oldest liveness view of the run was
	// taken (a one-shot list of pods, the runtime's list of sandboxes). A
	// file that changed after it may belong to a sandbox the view could not
	// know; zero for views that follow their source (the daemon's pods).
	ViewTime time.Time
}

// viewMargin covers the coarse clock that stamps inode times, which lags
// time.Now by up to one scheduler tick (10ms at HZ=100).
const viewMargin = 50 * time.Millisecond

// young returns the keep reason of an entry too young to judge by age, or ""
// when it is old enough. A file from the future (a clock step back) is young:
// keeping it is the safe side.
func (p Planner) young(e Entry) Reason {
	if !p.ViewTime.IsZero() && !e.ChangeTime.Before(p.ViewTime.Add(-viewMargin)) {
		return ReasonNewerThanView
	}
	if e.ModTime.After(p.Now.Add(-p.MinAge)) {
		return ReasonTooYoung
	}
	if p.Clock.Uptime < p.MinAge {
		return ReasonClockUnsettled
	}
	if e.ModTime.After(p.Now.Add(-p.MinAge).Add(-p.Clock.Forward)) {
		// It may look old only by the forward steps: its true age can be
		// below MinAge.
		return ReasonClockUnsettled
	}
	return ""
}

// Results decides a results file (phase 1). A file whose pod is live but
// whose sandbox is from an earlier boot comes back as ReasonPodLive with
// NeedsWitness set when pod liveness alone must find a newer sandbox of the
// pod before it goes (see Witnessed).
func (p Planner) Results(e ResultsEntry) Decision {
	if e.ParseReason != "" {
		return keep(e.ParseReason)
	}
	if p.RequirePodUID && e.Cache.PodUID == "" {
		// Before the boot record too: such a container may come back
		// after a reboot under the same ID.
		return keep(ReasonNoIdentity)
	}
	all, n := e.sandboxes()
	ids := all[:n]
	if p.Sandboxes != nil {
		// A file whose name and containerId disagree names two sandboxes:
		// either one known to the runtime keeps it.
		for _, id := range ids {
			if p.Sandboxes.Has(id) {
				return keep(ReasonSandboxLive)
			}
		}
	}
	earlier := p.Boot != nil && len(ids) > 0 && p.allEarlierBoot(ids)
	if earlier && p.Sandboxes != nil {
		// The runtime does not know the sandbox: a second witness. The age
		// and view rules still apply: a boot ID can change without a
		// reboot (a VM-isolated runtime, another --boot-id-file), and the
		// runtime lists a sandbox only once its ADD is done.
		if r := p.young(e.Entry); r != "" {
			return keep(r)
		}
		return remove(ReasonEarlierBoot)
	}
	gone := ReasonSandboxGone
	if p.Index != nil {
		var live, static bool
		gone = ReasonPodGone
		switch c := e.Cache; {
		case c.PodUID != "":
			live = p.Index.HasUID(c.PodUID)
			static = !live && p.maybeStatic(e.Entry, c.PodUID, c.PodName)
		case c.PodNamespace != "" && c.PodName != "":
			live, gone = p.Index.HasName(c.PodNamespace, c.PodName), ReasonPodNameGone
			static = !live && p.maybeStatic(e.Entry, "", c.PodName)
		default:
			return keep(ReasonNoIdentity)
		}
		switch {
		case static && p.Sandboxes == nil:
			return keep(ReasonStaticPod)
		case static:
			// The API server cannot vouch either way; the runtime, which
			// ran the sandbox, decides alone.
			gone = ReasonSandboxGone
		case live && earlier && e.Cache.PodUID != "":
			// A boot ID can change without a reboot (VM-isolated runtimes
			// give the daemon a new one when its pod restarts): only a
			// newer sandbox of the same pod proves that this one is gone.
			return Decision{Reason: ReasonPodLive, NeedsWitness: true}
		case live:
			return keep(ReasonPodLive)
		}
	}
	if p.Sandboxes != nil && len(ids) == 0 {
		// Sandbox liveness cannot vouch for a file that names no sandbox.
		return keep(ReasonNoIdentity)
	}
	if r := p.young(e.Entry); r != "" {
		return keep(r)
	}
	return remove(gone)
}

// Witnessed decides a results file e that Results returned with
// NeedsWitness, once phase 1 knows whether its pod has a sandbox of the
// current boot. The age and view rules apply as to any removal.
func (p Planner) Witnessed(e Entry, newer bool) Decision {
	if !newer {
		return keep(ReasonPodLive)
	}
	if r := p.young(e); r != "" {
		return keep(r)
	}
	return remove(ReasonEarlierBoot)
}

// Carriable reports whether the decision d of the results file e, which
// was read and parsed, may decide the other results files of its sandbox
// (its siblings) without their being opened. libcni names a results file
// `<network>-<sandbox>-<ifname>` and writes the sandbox into it as
// containerId, and a sandbox is one pod's for its life: the siblings of a
// file are the same pod's. Only a removal whose reason is the pod's or the
// sandbox's fate is carried (pod-gone, sandbox-gone; never a keep, which
// reads every live pod's file), and only from a file that fully names one
// identity: it parsed, names a pod UID, and its containerId is the sandbox
// its name carries. A static pod's name is judged with the file's own
// mtime (maybeStatic), so a pod whose name ends in the node's is not
// carried; nor is anything where a file without a UID must be kept
// (RequirePodUID). The sibling's own times are judged still (Sibling).
// See docs/design/prune-safety.md.
func (p Planner) Carriable(e ResultsEntry, d Decision) bool {
	switch {
	case !d.Remove || d.Reason != ReasonPodGone && d.Reason != ReasonSandboxGone:
		return false
	case e.ParseReason != "" || e.Cache.PodUID == "" || p.RequirePodUID:
		return false
	case p.Index != nil && p.NodeName != "" && hasNodeSuffix(e.Cache.PodName, p.NodeName):
		return false
	}
	byName, ok := cachefile.SandboxIDFromResultsName(e.Name)
	if !ok {
		return false
	}
	byContent, ok := cachefile.ParseSandboxID(e.Cache.ContainerID)
	return ok && byContent == byName
}

// Sibling decides a results file, not read, whose sandbox a sibling
// decided to remove for gone (Carriable): by its own times, as any
// removal, and else as its sibling.
func (p Planner) Sibling(e Entry, gone Reason) Decision {
	if r := p.young(e); r != "" {
		return keep(r)
	}
	return remove(gone)
}

// StaticNameGrace is how long past the minimum age a file whose pod is gone
// is kept as a possible static pod on the strength of its name alone.
// Within it, a static pod whose manifest sets a UUID may not have its mirror
// pod yet; past it, a name is no evidence: OpenShift's installer-<rev>-<node>
// pods end in the node's name too, and would otherwise leak forever.
const StaticNameGrace = time.Hour

// maybeStatic reports whether a file whose pod (uid, or its name when the
// file has no UID) the API server does not know may be a static pod's, whose
// death the API server cannot vouch for. Only positive evidence counts: a
// UID that the API server never gives (the kubelet's manifest hash), a
// mirror pod of that UID seen by the view, or a static pod's name
// (`<name>-<node>`) within StaticNameGrace.
func (p Planner) maybeStatic(e Entry, uid, name string) bool {
	switch {
	case uid != "" && !isUUID(uid):
		return true
	case p.NodeName == "" || !hasNodeSuffix(name, p.NodeName):
		return false
	case uid != "" && p.Mirrors != nil && p.Mirrors.SeenMirror(uid):
		return true
	}
	return e.ModTime.After(p.Now.Add(-p.MinAge - StaticNameGrace))
}

// hasNodeSuffix reports whether name ends in "-" and node, as a static pod's
// name does, without building the suffix for every file.
func hasNodeSuffix(name, node string) bool {
	i := len(name) - len(node) - 1
	return i >= 0 && name[i] == '-' && name[i+1:] == node
}

// isUUID reports whether s has the form the API server gives pod UIDs.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if c := s[i]; !isHex(c) {
				return false
			}
		}
	}
	return true
}

// isHex reports whether c is a hex digit of either case.
func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// allEarlierBoot reports whether every sandbox a file names was recorded
// under an earlier boot: a file that also names a sandbox not known to be
// earlier is judged by liveness alone.
func (p Planner) allEarlierBoot(ids []SandboxID) bool {
	for _, id := range ids {
		if !p.Boot.EarlierBoot(id) {
			return false
		}
	}
	return true
}

// Sandboxes returns the sandboxes a results file names: the ID in its file
// name and its containerId. A file that stays names them for phase 2.
func (e ResultsEntry) Sandboxes() []SandboxID {
	ids, n := e.sandboxes()
	return ids[:n:n]
}

// sandboxes is Sandboxes without an allocation, for the prune's hot path:
// the first n of ids.
func (e ResultsEntry) sandboxes() (ids [2]SandboxID, n int) {
	if id, ok := cachefile.SandboxIDFromResultsName(e.Name); ok {
		ids[n], n = id, n+1
	}
	if e.ParseReason == "" {
		if id, ok := cachefile.ParseSandboxID(e.Cache.ContainerID); ok && (n == 0 || ids[0] != id) {
			ids[n], n = id, n+1
		}
	}
	return ids, n
}

// Scratch decides a scratch file (phase 2) given the set of sandboxes that
// the remaining results files name. Its content is never consulted: a
// zero-length or corrupt scratch file is judged by its name alone. With
// sandbox liveness, the scratch file of a sandbox the runtime knows stays:
// multus reads it on the sandbox's CNI DEL. An unreferenced scratch file of a
// sandbox recorded under an earlier boot goes as earlier-boot, once old
// enough as any other.
func (p Planner) Scratch(e Entry, id SandboxID, referenced map[SandboxID]struct{}) Decision {
	if referenced == nil {
		// No results directory: "referenced by nothing" proves nothing.
		return keep(ReasonNoResultsDir)
	}
	if _, ok := referenced[id]; ok {
		return keep(ReasonSandboxReferenced)
	}
	if p.Sandboxes != nil && p.Sandboxes.Has(id) {
		return keep(ReasonSandboxLive)
	}
	if r := p.young(e); r != "" {
		return keep(r)
	}
	if p.Boot != nil && p.Boot.EarlierBoot(id) {
		return remove(ReasonEarlierBoot)
	}
	return remove(ReasonOrphanScratch)
}

// PodRef identifies a pod.
type PodRef struct {
	Namespace, Name, UID string
	// MirrorUID is a mirror pod's kubernetes.io/config.mirror annotation:
	// the UID its static pod runs under.
	MirrorUID string
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
		if p.MirrorUID != "" {
			s.uids[p.MirrorUID] = struct{}{}
		}
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
