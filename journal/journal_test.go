package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sweep-k8s/sweep/prune"
)

func removed(i int) prune.File {
	return prune.File{Cache: prune.CacheMultus, CacheDir: "/var/lib/cni/multus", Phase: prune.PhaseResults,
		Name: fmt.Sprintf("net1-%064d-eth0", i), Remove: true, Reason: prune.ReasonPodGone,
		Pod: prune.PodRef{Namespace: "default", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("uid-%d", i)}}
}

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := removed(-1)
	kept.Remove = false
	dry := removed(-2)
	dry.DryRun = true
	j.File(kept)
	j.File(dry)
	// Enough for two rotations: the journal keeps the last two files.
	const n = 12000
	for i := range n {
		j.File(removed(i))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName, OldFileName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() > MaxSize {
			t.Fatalf("%s: %v, %d bytes (max %d)", name, err, fi.Size(), MaxSize)
		}
	}
	all, err := Read(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 4000 || len(all) >= n {
		t.Fatalf("%d records kept of %d, want the latest few thousand", len(all), n)
	}
	last := all[len(all)-1]
	if last.Pod != fmt.Sprintf("default/web-%d", n-1) || last.UID != fmt.Sprintf("uid-%d", n-1) || last.Reason != prune.ReasonPodGone ||
		last.File != filepath.Join("/var/lib/cni/multus", "results", removed(n-1).Name) {
		t.Errorf("last record %+v", last)
	}
	for _, r := range all {
		if r.Pod == "default/web--1" || r.Pod == "default/web--2" {
			t.Errorf("a kept or dry-run file journaled: %+v", r)
		}
	}
	// A line cut short by a crash is skipped, the rest read.
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"time":"2026-12-02T0`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tail, err := Read(dir, 10)
	if err != nil || len(tail) != 10 || tail[9] != last {
		t.Fatalf("last 10: %d records, %v; want the 10 latest", len(tail), err)
	}
}
