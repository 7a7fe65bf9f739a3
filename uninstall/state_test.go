package uninstall

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestStatePersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Get("h1"); got != "" {
		t.Fatalf("empty state has %q", got)
	}
	for _, p := range []Progress{ProgressStarted, ProgressNodeDone} {
		if err := s.Set("h1", p, 3); err != nil {
			t.Fatal(err)
		}
	}
	again, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, n := again.Get("h1"), again.FailedFiles("h1"); got != ProgressNodeDone || n != 3 {
		t.Fatalf("after reload: %q, %d failed files", got, n)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestStateForgetsOldest(t *testing.T) {
	s, err := LoadState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxRemembered + 4 {
		if err := s.Set("h"+strconv.Itoa(i), ProgressDone, 0); err != nil {
			t.Fatal(err)
		}
	}
	if s.Get("h0") != "" || s.Get("h3") != "" || s.Get("h4") != ProgressDone || s.Get("h"+strconv.Itoa(maxRemembered+3)) != ProgressDone {
		t.Fatal("kept the wrong records")
	}
}

func TestStateCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir); err == nil {
		t.Fatal("a corrupt state file loaded; it must not silently reset finished work")
	}
}

func TestStateInMemory(t *testing.T) {
	s, err := LoadState("")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set("h", ProgressDone, 0); err != nil || s.Get("h") != ProgressDone {
		t.Fatalf("in-memory state: %v, %q", err, s.Get("h"))
	}
}
