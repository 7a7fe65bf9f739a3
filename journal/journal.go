// Package journal is the node's bounded record of what sweep removed: one
// JSON line per removed file or released reservation (time, file, pod, UID,
// sandbox, reason) in the daemon's state directory, kept across restarts
// and log rotation, and read back by `sweepd journal`. Its Reporter keeps
// it for the daemon's runs and `sweepd prune`'s, a reporter of each run
// (package report) beside the metrics and the Node's Events.
package journal

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
)

// File names in the state directory: the journal, and the one it replaced
// when it reached MaxSize.
const (
	FileName    = "journal.jsonl"
	OldFileName = "journal.1.jsonl"
)

// MaxSize is the size at which the journal starts over, the previous one
// kept as OldFileName: at most twice this on disk, at least this of the
// latest records (about 4,000 of them).
const MaxSize = 1 << 20

// Record is one removal.
type Record struct {
	Time    time.Time    `json:"time"`
	Cache   string       `json:"cache"`
	Phase   string       `json:"phase"`
	File    string       `json:"file"`
	Pod     string       `json:"pod,omitempty"` // namespace/name
	UID     string       `json:"uid,omitempty"`
	Sandbox string       `json:"sandbox,omitempty"`
	Reason  prune.Reason `json:"reason"`
}

// Writer appends to the journal of a state directory. It is not safe for
// concurrent use: the prune calls Deps.OnFile one file at a time.
type Writer struct {
	dir  string
	f    *os.File
	w    *bufio.Writer
	size int64
	err  error // the first write error; the journal stops there
}

// Open opens, or creates, the journal in dir.
func Open(dir string) (*Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Writer{dir: dir, f: f, w: bufio.NewWriter(f), size: fi.Size()}, nil
}

// File records f if it was removed by a real run (prune.Deps.OnFile).
func (j *Writer) File(f prune.File) {
	if !f.Remove || f.DryRun || j.err != nil {
		return
	}
	path := f.RelPath()
	if !filepath.IsAbs(path) {
		path = filepath.Join(f.CacheDir, path) // whole: the journal outlives the daemon's flags
	}
	line, err := json.Marshal(Record{Time: time.Now().UTC(), Cache: string(f.Cache), Phase: string(f.Phase), File: path,
		Pod: f.PodName(), UID: f.Pod.UID, Sandbox: f.Sandbox, Reason: f.Reason})
	if err != nil {
		j.err = err
		return
	}
	if j.size+int64(len(line))+1 > MaxSize {
		if j.err = j.rotate(); j.err != nil {
			return
		}
	}
	n, err := j.w.Write(append(line, '\n'))
	j.size += int64(n)
	j.err = err
}

// rotate starts a new journal, the current one kept as OldFileName.
func (j *Writer) rotate() error {
	if err := j.w.Flush(); err != nil {
		return err
	}
	if err := j.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(j.dir, FileName), filepath.Join(j.dir, OldFileName)); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(j.dir, FileName), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	j.f, j.w, j.size = f, bufio.NewWriter(f), 0
	return nil
}

// Flush writes what is buffered, at the end of a run; it returns the
// first error of the writes since Open.
func (j *Writer) Flush() error {
	if j.err != nil {
		return j.err
	}
	j.err = j.w.Flush()
	return j.err
}

// Close flushes and closes the journal.
func (j *Writer) Close() error {
	return errors.Join(j.Flush(), j.f.Close())
}

// Read returns the last n records of the journal in dir (all with n 0),
// oldest first. A line that does not parse (a write cut short by a crash)
// is skipped.
func Read(dir string, n int) ([]Record, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	var recs []Record
	for _, name := range []string{OldFileName, FileName} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(data), "\n") {
			var r Record
			if l == "" || json.Unmarshal([]byte(l), &r) != nil {
				continue
			}
			recs = append(recs, r)
		}
	}
	if n > 0 && len(recs) > n {
		recs = slices.Clone(recs[len(recs)-n:])
	}
	return recs, nil
}

// Reporter keeps the journal of a daemon's runs: File records each removal
// as it happens (prune.Deps.OnFile), Report writes what a run left
// buffered when it ends (a report.Reporter). The journal is opened at the
// first removal, its directory made if need be, and tried again at the
// next run when that fails: a state directory made after the daemon
// started still gets the journal. A failure is logged once.
type Reporter struct {
	dir string
	log *slog.Logger

	w      *Writer
	tried  bool // this run tried to open the journal
	failed bool // a failure was logged
}

// NewReporter keeps the journal in dir.
func NewReporter(dir string, log *slog.Logger) *Reporter { return &Reporter{dir: dir, log: log} }

// File records f (prune.Deps.OnFile); runs call it one file at a time.
func (r *Reporter) File(f prune.File) {
	if !f.Remove || f.DryRun {
		return
	}
	if r.w == nil {
		if r.tried {
			return
		}
		r.tried = true
		w, err := openDir(r.dir)
		if err != nil {
			r.fail(err)
			return
		}
		r.w = w
	}
	r.w.File(f)
}

// Report implements report.Reporter. A run that did not start wrote
// nothing, and may be reported beside one that runs (still-running).
func (r *Reporter) Report(_ context.Context, run report.Run) {
	if !run.Started() {
		return
	}
	r.tried = false
	if r.w != nil {
		if err := r.w.Flush(); err != nil {
			r.fail(err)
		}
	}
}

// Close closes the journal, once no run can write to it.
func (r *Reporter) Close() error {
	if r.w == nil {
		return nil
	}
	return r.w.Close()
}

func (r *Reporter) fail(err error) {
	if r.failed {
		return
	}
	r.failed = true
	r.log.Warn("cannot write the journal of removals; the log and the Node's Events still have them", "state_dir", r.dir, "error", err)
}

// openDir opens the journal in dir, making dir first if it is not there.
func openDir(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return Open(dir)
}
