package prune

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/nofollow"
)

// Targets narrow a run to the files of pods whose deletion the caller has
// confirmed: the daemon's check of a pod soon after its deletion, which
// frees what the kubelet's own teardown left without waiting for the next
// scheduled run. The run finds the pods' results files itself
// (Options.PodFiles) and reads only those; a results file that names a pod
// not in UIDs is kept (ReasonNotTarget), and every other rule applies as in
// a full run. Scratch files go only for sandboxes of the targeted pods'
// results files, once no results file names them; host-local reservations
// (Config.HostLocalDirs) only for those sandboxes too. What became of each
// pod is Summary.Targeted.
//
// The minimum age of a targeted file is the shorter of Config.MinAge and
// Config.ADDBound. Config.MinAge covers a file whose pod the views may not
// know yet, a pod just bound whose ADD runs or that the watch has not
// brought: no age is safe for those but a long one. A targeted pod was
// seen, its deletion confirmed by the API server, and a UID is never given
// twice, so no ADD can start for it any more; the only ADD that can still
// run is of its own last sandbox, which the kubelet bounds (ADDBound). A
// static pod's UID is the kubelet's hash of its manifest, which comes back
// with the manifest: the caller must never target one. See
// docs/design/prune-safety.md.
type Targets struct {
	// UIDs are the pods confirmed deleted.
	UIDs map[string]struct{}
}

func (t *Targets) has(uid string) bool {
	_, ok := t.UIDs[uid]
	return uid != "" && ok
}

// ErrTargetsInvalid means Options.Targets cannot narrow a run.
var ErrTargetsInvalid = errors.New("invalid targets")

func (t *Targets) validate() error {
	if len(t.UIDs) == 0 {
		return fmt.Errorf("%w: no pod UIDs", ErrTargetsInvalid)
	}
	return nil
}

// TargetedCounts is what a targeted run (Options.Targets) found and did,
// pod by pod.
type TargetedCounts struct {
	// Pods holds the outcome of each targeted pod that has results files
	// left in the caches; a pod not in it had none.
	Pods map[string]PodOutcome `json:"pods"`
	// Read counts the results files read to find the pods' files, Unread
	// those not read because the budget was spent (PodFiles): a pod may
	// then have files the run did not find.
	Read   int `json:"read"`
	Unread int `json:"unread"`
}

// PodOutcome is what a targeted run did with one pod's results files.
type PodOutcome struct {
	// Removed and Kept count its results files removed (in a dry run,
	// that a real run would remove) and kept.
	Removed int `json:"removed"`
	Kept    int `json:"kept"`
	// Retry says that a file was kept for a reason that passes
	// (RetryReasons): a later run may remove it. RetryAt, when set, is
	// the earliest time worth it: when the youngest of its files kept as
	// too young is old enough.
	Retry   bool      `json:"retry"`
	RetryAt time.Time `json:"retryAt,omitzero"`
}

// note adds a results file's outcome; minAge is the run's.
func (o *PodOutcome) note(f File, minAge time.Duration) {
	if f.Remove {
		o.Removed++
		return
	}
	o.Kept++
	if !Retried(f.Reason) {
		return
	}
	o.Retry = true
	if f.Reason == ReasonTooYoung && !f.ModTime.IsZero() {
		// A second past the minimum age, so that the retry does not find
		// the file a tick too young again.
		if at := f.ModTime.Add(minAge + time.Second); at.After(o.RetryAt) {
			o.RetryAt = at
		}
	}
}

// PodFiles finds the results files of given pods without reading the caches
// anew each time: it remembers the pod UID of each results file it has
// read (or that a run reported, Observe) for as long as the file's name
// stays in its directory, so that a file is read once, not once per
// deletion. A file that names no pod (yet) is not remembered. Each Find lists the names of the results directories, which
// costs a getdents per few hundred names, and reads only the files it has
// not seen. It is safe for concurrent use.
type PodFiles struct {
	mu sync.Mutex
	// known maps a cache's results file name to its pod UID ("" when the
	// file names none or could not be read as a cache file).
	known map[CacheName]map[string]string
	// max bounds the names remembered per cache, readBudget the files read
	// by one Find: a cache that holds a large leak is the scheduled run's.
	max, readBudget int
}

// DefaultPodFilesMax and DefaultPodFilesReadBudget bound a PodFiles: a node
// runs a few hundred pods with a few attachments each.
const (
	DefaultPodFilesMax        = 16384
	DefaultPodFilesReadBudget = 2048
)

// NewPodFiles returns an empty memory of the caches' results files.
func NewPodFiles() *PodFiles {
	return &PodFiles{known: map[CacheName]map[string]string{}, max: DefaultPodFilesMax, readBudget: DefaultPodFilesReadBudget}
}

// Observe remembers a results file that a run left, as Deps.OnFile reports
// it, so that a later Find need not read it.
func (p *PodFiles) Observe(f File) {
	if f.Phase != PhaseResults || f.Remove && !f.DryRun || f.Pod.UID == "" {
		// A file that could not be read as a pod's now may be one being
		// written: a later Find reads it again.
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.known[f.Cache]
	if m == nil {
		m = map[string]string{}
		p.known[f.Cache] = m
	}
	if _, ok := m[f.Name]; ok || len(m) < p.max {
		m[f.Name] = f.Pod.UID
	}
}

// FindStats is what a Find cost.
type FindStats struct {
	// Listed counts the names listed, Read the files read because they
	// were not known, Unread the files not read because the budget was
	// spent (their pods' files are left to the scheduled run).
	Listed, Read, Unread int
}

// Find returns the results files of the pods uids in the caches of cfg.
func (p *PodFiles) Find(cfg Config, uids map[string]struct{}) (map[CacheName][]string, FindStats, error) {
	cfg = cfg.withDefaults(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	var st FindStats
	found := map[CacheName][]string{}
	buf := make([]byte, cfg.MaxFileSize)
	for _, c := range cfg.caches() {
		names, err := p.findCache(c, uids, buf, &st)
		if err != nil {
			return found, st, err
		}
		if len(names) > 0 {
			found[c.name] = names
		}
	}
	return found, st, nil
}

func (p *PodFiles) findCache(c cache, uids map[string]struct{}, buf []byte, st *FindStats) ([]string, error) {
	dir, err := nofollow.OpenDir(unix.AT_FDCWD, c.dir)
	if err != nil {
		return nil, fmt.Errorf("open cache directory %s: %w", c.dir, err)
	}
	defer dir.Close()
	if !c.flat {
		results, err := nofollow.OpenDir(int(dir.Fd()), "results")
		if errors.Is(err, unix.ENOENT) {
			return nil, nil // older multus: nothing to find by pod
		}
		if err != nil {
			return nil, fmt.Errorf("open %s/results: %w", c.dir, err)
		}
		defer results.Close()
		dir = results
	}
	old := p.known[c.name]
	known := make(map[string]string, len(old))
	var found []string
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			st.Listed++
			if _, ok := cachefile.SandboxIDFromResultsName(name); !ok {
				continue // not a results file's name: no pod's
			}
			uid, ok := old[name]
			if !ok {
				if st.Read >= p.readBudget {
					st.Unread++
					continue
				}
				st.Read++
				uid = readPodUID(int(dir.Fd()), name, buf)
			}
			// A file that names no pod is not remembered: it may have
			// been read while libcni wrote it (a truncate, then the
			// write), and is read again by the next Find.
			if uid != "" && len(known) < p.max {
				known[name] = uid
			}
			if _, ok := uids[uid]; ok && uid != "" {
				found = append(found, name)
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return found, fmt.Errorf("read %s: %w", dir.Name(), err)
		}
	}
	p.known[c.name] = known
	return found, nil
}

// readPodUID returns the pod UID a results file names, "" when it names
// none or is not a regular file that parses. It never follows a symlink nor
// blocks on a FIFO; the run that acts on the file reads it again.
func readPodUID(dirfd int, name string, buf []byte) string {
	var st unix.Stat_t
	fd, err := nofollow.OpenRegular(dirfd, name, unix.O_NOATIME, &st)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	if st.Size > int64(len(buf)) {
		return ""
	}
	n, err := nofollow.ReadFull(fd, buf[:st.Size])
	if err != nil {
		return ""
	}
	cf, err := cachefile.ParseCacheFile(buf[:n])
	if err != nil {
		return ""
	}
	return cf.PodUID
}

// UIDOf returns the pod UID that p remembers for a results file of a cache,
// "" for none: the pod of a file that a run could not read again.
func (p *PodFiles) UIDOf(c CacheName, name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known[c][name]
}

// Len returns how many results files p remembers, for its memory's metric.
func (p *PodFiles) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.known {
		n += len(m)
	}
	return n
}
