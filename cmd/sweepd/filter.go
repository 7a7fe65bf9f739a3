package main

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sweep-k8s/sweep/internal/suggest"
	"github.com/sweep-k8s/sweep/journal"
	"github.com/sweep-k8s/sweep/prune"
)

// fileFilter is what --pod, --uid, --reason and --file select of a
// listing: a file is listed when it matches every one given. It answers
// "why is this pod's file kept" on a node of 300,000 files, where the
// table's first 1,000 rows rarely hold it.
type fileFilter struct {
	pod     string // namespace/name, or a name in any namespace
	uid     string
	reasons []string
	file    string // a path.Match pattern
	// sandboxes are those of the results files that --pod and --uid
	// matched. A scratch file or a reservation names no pod, only its
	// sandbox: it matches them by that, as a run decides it after the
	// results files (phase 2, then the reservations).
	sandboxes map[string]bool
}

// addFilterFlags registers the listing's filters on fs.
func addFilterFlags(fs *pflag.FlagSet) *fileFilter {
	f := &fileFilter{sandboxes: map[string]bool{}}
	fs.StringVar(&f.pod, "pod", "", "list only the files of this pod, NAMESPACE/NAME or a NAME in any namespace: its results files, and the scratch files and reservations of their sandboxes")
	fs.StringVar(&f.uid, "uid", "", "list only the files of the pod of this UID, as --pod")
	fs.Var(&reasonsValue{p: &f.reasons}, "reason", "list only the files removed or kept for this reason (docs/prune.md#reasons); repeat or separate by commas for any of several")
	fs.StringVar(&f.file, "file", "", "list only the files whose FILE column, full path or name matches this shell pattern (results/*-SANDBOX-*)")
	return f
}

// validate refuses a filter that can match nothing by its form.
func (f *fileFilter) validate() error {
	if f.pod != "" {
		ns, name, namespaced := strings.Cut(f.pod, "/")
		if name == "" && namespaced || ns == "" || strings.Contains(name, "/") {
			return usagef("--pod %q: want NAMESPACE/NAME or NAME", f.pod)
		}
	}
	if _, err := path.Match(f.file, ""); err != nil {
		return usagef("--file %q: %w", f.file, err)
	}
	return nil
}

// active reports whether any filter is given.
func (f *fileFilter) active() bool {
	return f.pod != "" || f.uid != "" || len(f.reasons) > 0 || f.file != ""
}

// String is the filters as flags, for what the listing says of them.
func (f *fileFilter) String() string {
	var s []string
	for _, kv := range [][2]string{{"pod", f.pod}, {"uid", f.uid}, {"reason", strings.Join(f.reasons, ",")}, {"file", f.file}} {
		if kv[1] != "" {
			s = append(s, "--"+kv[0]+"="+kv[1])
		}
	}
	return strings.Join(s, " ")
}

// match reports whether the listing shows file. It must see the files in
// the order of the run, as OnFile gives them: a pod's sandboxes are known
// from its results files when their scratch files come.
func (f *fileFilter) match(file prune.File) bool {
	if f.pod != "" || f.uid != "" {
		if file.Pod == (prune.PodRef{}) {
			if !f.sandboxes[file.Sandbox] || file.Sandbox == "" {
				return false
			}
		} else {
			if !f.matchPod(file.Pod) {
				return false
			}
			if file.Sandbox != "" {
				f.sandboxes[file.Sandbox] = true
			}
		}
	}
	if len(f.reasons) > 0 && !slices.Contains(f.reasons, string(file.Reason)) {
		return false
	}
	if f.file != "" {
		full := file.Name
		if !filepath.IsAbs(full) {
			full = filepath.Join(file.CacheDir, file.RelPath())
		}
		return slices.ContainsFunc([]string{file.Path(), full, filepath.Base(file.Name)}, func(s string) bool {
			ok, _ := path.Match(f.file, s)
			return ok
		})
	}
	return true
}

// matchRecord reports whether the journal lists r, as match does a run's
// file: the records come in the order of the runs that wrote them.
func (f *fileFilter) matchRecord(r journal.Record) bool {
	ns, name, ok := strings.Cut(r.Pod, "/")
	if !ok {
		ns, name = "", r.Pod
	}
	file := prune.File{Cache: prune.CacheName(r.Cache), Phase: prune.Phase(r.Phase), CacheDir: filepath.Dir(r.File), Name: filepath.Base(r.File),
		Pod: prune.PodRef{Namespace: ns, Name: name, UID: r.UID}, Sandbox: r.Sandbox, Reason: r.Reason, Remove: true}
	if file.RelPath() != file.Name {
		file.CacheDir = filepath.Dir(file.CacheDir) // results/ is the cache's
	}
	return f.match(file)
}

// matchPod reports whether pod is --pod's and --uid's.
func (f *fileFilter) matchPod(pod prune.PodRef) bool {
	if f.uid != "" && !strings.EqualFold(pod.UID, f.uid) {
		return false
	}
	if f.pod == "" {
		return true
	}
	if ns, name, ok := strings.Cut(f.pod, "/"); ok {
		return pod.Namespace == ns && pod.Name == name
	}
	return pod.Name == f.pod
}

// allReasons are the reasons a run gives its files, each once.
func allReasons() []string {
	var out []string
	for _, r := range slices.Concat(prune.RemovedReasons(), prune.KeptReasons(), prune.ReservationReleasedReasons(), prune.ReservationKeptReasons()) {
		if !slices.Contains(out, string(r)) {
			out = append(out, string(r))
		}
	}
	return out
}

// reasonsValue is --reason: reasons, repeated or separated by commas, each
// one that a run gives.
type reasonsValue struct{ p *[]string }

func (r *reasonsValue) Set(v string) error {
	known := allReasons()
	for _, w := range strings.Split(v, ",") {
		if !slices.Contains(known, w) {
			msg := fmt.Sprintf("unknown reason %q", w)
			if s := suggest.Words(known, w); len(s) > 0 {
				msg += " (did you mean " + orList(s) + "?)"
			}
			return fmt.Errorf("%s; the reasons: docs/prune.md#reasons", msg)
		}
		if !slices.Contains(*r.p, w) {
			*r.p = append(*r.p, w)
		}
	}
	return nil
}

func (r *reasonsValue) Type() string { return "strings" }

// String is the reasons given, "" for none: pflag's help prints a default
// unless it is "".
func (r *reasonsValue) String() string { return strings.Join(*r.p, ",") }
