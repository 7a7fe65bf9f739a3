package journal

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
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

// TestReporter: the daemon's journal is opened at the first removal, its
// state directory made if it is not there yet (a daemon started before it
// would otherwise journal nothing for its whole life, issue 52), tried
// again at the next run when it cannot be, and a failure is logged once.
func TestReporter(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "state")
	var logs bytes.Buffer
	r := NewReporter(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	ran := report.Run{Summary: &prune.Summary{}} // a run that went through its files

	// A run that removes nothing opens nothing.
	kept := removed(0)
	kept.Remove = false
	r.File(kept)
	r.Report(ctx, ran)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a run that removed nothing made the state directory: %v", err)
	}

	// The state directory cannot be made (a file in its way): the removals
	// of this run are not journaled, and that is said once.
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.File(removed(1))
	r.File(removed(2))
	r.Report(ctx, ran)
	r.File(removed(3))
	r.Report(ctx, ran)
	if n := strings.Count(logs.String(), "cannot write the journal"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}

	// Once it can be made, the next run's removals are journaled.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	r.File(removed(4))
	r.File(removed(5))
	r.Report(ctx, ran)
	recs, err := Read(dir, 0)
	if err != nil || len(recs) != 2 || recs[0].Pod != "default/web-4" {
		t.Fatalf("Read: %v, %+v; want web-4 and web-5", err, recs)
	}
	// A run that did not start (reported beside one that runs) changes
	// nothing: the next removal is still journaled.
	r.Report(ctx, report.Run{})
	r.File(removed(6))
	r.Report(ctx, ran)
	if recs, err := Read(dir, 0); err != nil || len(recs) != 3 {
		t.Fatalf("Read: %v, %d records; want 3", err, len(recs))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
