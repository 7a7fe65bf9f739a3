package prune

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
)

// maxSiblingVerdicts bounds the sandboxes whose verdict a run remembers for
// their other results files (siblings): a few hundred KiB, whatever the
// size of the cache. libcni writes a sandbox's files one after the other,
// so in a directory read in creation order (tmpfs) a sibling comes within a
// few entries; in a hashed directory (ext4, XFS) it may come anywhere, and
// a sibling whose verdict was forgotten is read, as any file. Remembering
// every sandbox of a 1M-file cache would take tens of MiB.
const maxSiblingVerdicts = 4096

// siblingVerdict is what a results file that was read, parsed and removed
// (or, in a dry run, would be) says of its sandbox: its pod is gone, for
// reason, and which pod it was, for what its siblings report (nil when no
// one would see it: no OnFile, no debug log, past the removals logged).
type siblingVerdict struct {
	reason Reason
	pod    *PodRef
}

// siblingVerdicts remembers, per sandbox, the verdict of a results file
// that Planner.Carriable allows to decide its siblings, for the last
// maxSiblingVerdicts sandboxes: the workers of a phase share it, so that a
// sibling handled by another worker is not read either. Two workers that
// handle two siblings at once both read theirs.
type siblingVerdicts struct {
	mu sync.Mutex
	m  map[SandboxID]siblingVerdict
	// order holds the remembered sandboxes in the order they came, a ring:
	// the oldest is forgotten first.
	order []SandboxID
	next  int
}

func newSiblingVerdicts() *siblingVerdicts {
	return &siblingVerdicts{m: map[SandboxID]siblingVerdict{}}
}

func (s *siblingVerdicts) get(id SandboxID) (siblingVerdict, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	return v, ok
}

func (s *siblingVerdicts) put(id SandboxID, v siblingVerdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[id]; ok {
		s.m[id] = v
		return
	}
	if len(s.order) < maxSiblingVerdicts {
		s.order = append(s.order, id)
	} else {
		delete(s.m, s.order[s.next])
		s.order[s.next] = id
		s.next = (s.next + 1) % maxSiblingVerdicts
	}
	s.m[id] = v
}

// sibling handles a results file whose sandbox a sibling already decided
// (v), without opening it: one lstat, which is both the plan's (a regular
// file, its own age and ctime against the view) and the re-check's, then
// the unlink. It returns false when the file must be read as any other (it
// could not be stat'ed for another reason than being gone).
func (w *worker) sibling(dirfd int, name string, id SandboxID, v siblingVerdict) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			w.counts.vanished[PhaseResults]++
			return true
		}
		return false // read: it reports its error there
	}
	w.counts.carried++
	f := w.file(PhaseResults, name)
	var d Decision
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Replaced since the directory was read: never followed.
		d = keep(ReasonNotRegular)
	} else {
		e := Entry{Name: name, ModTime: time.Unix(st.Mtim.Unix()), ChangeTime: time.Unix(st.Ctim.Unix())}
		f.ModTime = e.ModTime
		d = w.planner.Sibling(e, v.reason)
		if d.Remove {
			d = w.unlink(dirfd, name, d)
		}
	}
	if d.Reason == reasonVanished {
		w.counts.vanished[PhaseResults]++
		return true
	}
	if !d.Remove {
		// Kept: its name still names the sandbox, whose scratch file
		// stays.
		w.referenced[id] = struct{}{}
	}
	if d.Reason != ReasonNotRegular {
		w.left(st, d)
	}
	if v.pod != nil {
		// The sibling's pod, by libcni's naming; see Planner.Carriable.
		f.Pod = *v.pod
	}
	w.record(f, d)
	return true
}

// carryFrom remembers the verdict of a results file that was read and
// removed (in a dry run, would be) for its siblings, when the planner
// allows it.
func (w *worker) carryFrom(re *ResultsEntry, d Decision) {
	if w.siblings == nil || !d.Remove || !w.planner.Carriable(*re, d) {
		return
	}
	id, _ := cachefile.SandboxIDFromResultsName(re.Name) // Carriable checked it
	v := siblingVerdict{reason: d.Reason}
	if e := w.e; e.opts.OnFile != nil || e.debug || e.removals.Load() < maxRemovalLogs {
		v.pod = &PodRef{Namespace: re.Cache.PodNamespace, Name: re.Cache.PodName, UID: re.Cache.PodUID}
	}
	w.siblings.put(id, v)
}
