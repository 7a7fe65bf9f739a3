package uninstall

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sweep-k8s/sweep/internal/atomicfile"
)

// stateFile is the file under the state directory.
const stateFile = "uninstall-state.json"

// maxRemembered bounds the state file: older contents are forgotten.
const maxRemembered = 16

// Progress is how far this daemon got with one content.
type Progress string

// Progress values, in order.
const (
	// ProgressStarted: the node phase began; an interrupted run redoes it
	// (removing files is idempotent).
	ProgressStarted Progress = "started"
	// ProgressNodeDone: this node's files are done; a restart only
	// re-reports to the barrier.
	ProgressNodeDone Progress = "node-done"
	// ProgressDone: the whole cleanup of this content is over (cluster
	// phase and self-cleanup done, or the DaemonSet is gone).
	ProgressDone Progress = "done"
)

type stateRecord struct {
	Progress Progress `json:"progress"`
	// FailedFiles is how many files the node phase failed to remove,
	// reported again after a restart.
	FailedFiles int       `json:"failedFiles,omitempty"`
	Updated     time.Time `json:"updated"`
}

// State remembers, by content hash, how far the cleanup got, in a file
// under a directory that survives restarts (a hostPath in the DaemonSet).
// With an empty directory it lives in memory only.
type State struct {
	mu   sync.Mutex
	dir  string
	recs map[string]stateRecord
	last time.Time // strictly increasing Updated, so the oldest is well defined
}

// LoadState reads the state under dir; a missing file is an empty state.
// A corrupt file is an error rather than a silent reset, which would redo
// work on every node.
func LoadState(dir string) (*State, error) {
	s := &State{dir: dir, recs: map[string]stateRecord{}}
	if dir == "" {
		return s, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	if err := json.Unmarshal(data, &s.recs); err != nil {
		return nil, fmt.Errorf("state file %s: %w", filepath.Join(dir, stateFile), err)
	}
	if s.recs == nil {
		s.recs = map[string]stateRecord{}
	}
	for _, r := range s.recs {
		if r.Updated.After(s.last) {
			s.last = r.Updated
		}
	}
	return s, nil
}

// Get returns the progress recorded for hash, or "".
func (s *State) Get(hash string) Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[hash].Progress
}

// FailedFiles returns the failed file count recorded for hash.
func (s *State) FailedFiles(hash string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[hash].FailedFiles
}

// Set records progress (and the failed file count) for hash and writes the file atomically (temporary
// file, fsync, rename, fsync of the directory), so a crash leaves either
// the old or the new state.
func (s *State) Set(hash string, p Progress, failedFiles int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	if !now.After(s.last) {
		now = s.last.Add(time.Nanosecond)
	}
	s.last = now
	s.recs[hash] = stateRecord{Progress: p, FailedFiles: failedFiles, Updated: now}
	if len(s.recs) > maxRemembered {
		keys := make([]string, 0, len(s.recs))
		for k := range s.recs {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return s.recs[keys[i]].Updated.Before(s.recs[keys[j]].Updated) })
		for _, k := range keys[:len(keys)-maxRemembered] {
			delete(s.recs, k)
		}
	}
	if s.dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(s.recs, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.dir, stateFile, data); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}
