package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// BenchmarkPruneVsFind is the measured run of the prune: a node's cache of
// the real shapes on tmpfs (a third of the sandboxes' files are scratch, two
// thirds results; 110 sandboxes live, the rest stale), pruned by the built
// `sweepd prune` against a real API server, and the same tree deleted by
// `find DIR -type f -delete`, alternately in one run. It reports both wall
// times, their ratio, sweepd's peak RSS, and the prune's own duration as its
// summary says (sweepd-run-s/op: the process's time less its start, the
// pods' list and the proof of the views). Example:
//
//	go test -run x -bench 'PruneVsFind/files=100k' -benchtime 5x ./test/e2e/
func BenchmarkPruneVsFind(b *testing.B) {
	for _, n := range []struct {
		name      string
		sandboxes int
	}{{"10k", 3334}, {"100k", 33334}, {"1M", 333334}} {
		b.Run("files="+n.name, func(b *testing.B) { benchPruneVsFind(b, n.sandboxes) })
	}
}

// benchNode builds sweepd and starts a control plane with the 110 live
// pods of node-a that the benchmarks' caches keep.
func benchNode(b *testing.B) (sweepd string, cp *controlplane.ControlPlane, live []multuscache.Pod) {
	sweepd = testbin.Build(b, "./cmd/sweepd")
	cp = controlplane.Start(b)
	cs := cp.Clientset(b)
	kubeobj.EnsureServiceAccount(b, cs, "default")
	live = make([]multuscache.Pod, 110)
	for i := range live {
		name := fmt.Sprintf("live-%d", i)
		live[i] = multuscache.Pod{Namespace: "default", Name: name, UID: kubeobj.CreatePod(b, cs, "default", name, "node-a")}
	}
	return sweepd, cp, live
}

func benchPruneVsFind(b *testing.B, sandboxes int) {
	sweepd, cp, live := benchNode(b)
	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		b.Fatalf("no tmpfs at %s: %v", shm, err)
	}
	base, err := os.MkdirTemp(shm, "sweep-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	// Each iteration writes a fresh tree and one copy of it: keeping a
	// pristine source as well would take a third more inodes, and tmpfs
	// runs out of them at 1M files.
	generate := func(a, s string) {
		start := time.Now()
		if err := multuscache.Node(a, sandboxes, live, time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", a, s).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		b.Logf("generated 2 x %d files in %s", 3*sandboxes, time.Since(start))
	}

	if _, err := os.Stat("/usr/bin/time"); err != nil {
		b.Fatalf("GNU time measures sweepd's peak RSS (apt-get install time): %v", err)
	}
	rssFile := filepath.Join(b.TempDir(), "rss")
	var findTotal, sweepTotal, runTotal time.Duration
	var maxRSS int64
	var pruneOut []byte
	timed := func(cmd *exec.Cmd) time.Duration {
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		if cmd.Args[0] == "/usr/bin/time" {
			pruneOut = out
		}
		return time.Since(t0)
	}
	// The summary's first line ends with the run's duration: "...; 0.812s".
	runSeconds := regexp.MustCompile(`(?m)^\S+: scanned .*; ([0-9.]+)s$`)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		a, s := filepath.Join(base, "find"), filepath.Join(base, "sweepd")
		os.RemoveAll(a)
		os.RemoveAll(s)
		generate(a, s)
		predateViews()
		find := exec.Command("find", a, "-type", "f", "-delete")
		// GNU time reports the peak RSS of sweepd alone. The rusage of a
		// child of this process would not: Go starts children with
		// vfork, and Linux keeps the high-water mark of the memory a
		// process had before exec, here the whole test binary's.
		prune := exec.Command("/usr/bin/time", "-f", "%M", "-o", rssFile, sweepd, "prune", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+s, "--min-age=1m", "--log-level=warn")
		b.StartTimer()
		// Alternate which goes first, so that neither always runs on a
		// warmer cache.
		if i%2 == 0 {
			findTotal += timed(find)
			sweepTotal += timed(prune)
		} else {
			sweepTotal += timed(prune)
			findTotal += timed(find)
		}
		m := runSeconds.FindSubmatch(pruneOut)
		if m == nil {
			b.Fatalf("no duration in sweepd's summary:\n%s", pruneOut)
		}
		sec, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			b.Fatal(err)
		}
		runTotal += time.Duration(sec * float64(time.Second))
		if rss := peakRSS(b, rssFile); rss > maxRSS {
			maxRSS = rss
		}
		b.StopTimer()
		left, _ := os.ReadDir(filepath.Join(s, "results"))
		if len(left) != 2*len(live) {
			b.Fatalf("%d results files left, want %d", len(left), 2*len(live))
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(findTotal.Seconds()/n, "find-s/op")
	b.ReportMetric(sweepTotal.Seconds()/n, "sweepd-s/op")
	b.ReportMetric(runTotal.Seconds()/n, "sweepd-run-s/op")
	b.ReportMetric(sweepTotal.Seconds()/findTotal.Seconds(), "ratio")
	b.ReportMetric(runTotal.Seconds()/findTotal.Seconds(), "run-ratio")
	b.ReportMetric(float64(maxRSS)/1024, "sweepd-peak-RSS-MiB")
}

// peakRSS reads the peak RSS in KiB that GNU time wrote to file.
func peakRSS(b *testing.B, file string) int64 {
	b.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		b.Fatalf("GNU time output %q: %v", data, err)
	}
	return kib
}

// BenchmarkDryRunMemory is the memory of the dry run an operator runs in the
// daemon's container on a node with a backlog (issue 34: 300,000 files, as
// in multus issue #1488): `sweepd prune --dry-run` prints a table, which it
// holds in memory to align and sort. It reports sweepd's peak RSS with the
// default --limit and with --limit 0 (every file in the table), against a
// real API server. Example:
//
//	go test -run x -bench 'DryRunMemory' -benchtime 1x ./test/e2e/
func BenchmarkDryRunMemory(b *testing.B) {
	sweepd, cp, live := benchNode(b)
	base, err := os.MkdirTemp("/dev/shm", "sweep-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "multus")
	if err := multuscache.Node(dir, 100000, live, time.Now().Add(-time.Hour)); err != nil {
		b.Fatal(err)
	}
	predateViews()
	rssFile := filepath.Join(b.TempDir(), "rss")
	for _, limit := range []string{"1000", "0"} {
		b.Run("limit="+limit, func(b *testing.B) {
			var maxRSS int64
			for b.Loop() {
				cmd := exec.Command("/usr/bin/time", "-f", "%M", "-o", rssFile, sweepd, "prune", "--dry-run", "--limit="+limit,
					"--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=1m", "--log-level=warn")
				var stderr strings.Builder
				cmd.Stdout, cmd.Stderr = io.Discard, &stderr
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v: %s", err, stderr.String())
				}
				maxRSS = max(maxRSS, peakRSS(b, rssFile))
			}
			b.ReportMetric(float64(maxRSS)/1024, "sweepd-peak-RSS-MiB")
		})
	}
}
