package e2e

import (
	"cmp"
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
// `find DIR -type f -delete`, in one run, their order rotating from one
// iteration to the next. The node's fake kubelet renews its Lease as a
// kubelet does by default (every 10s, a 40s Lease), so that the one-shot's
// proof of the kubelet costs what it costs on a node. It reports both wall
// times, their ratio, sweepd's peak RSS, the prune's own duration as its
// summary says (sweepd-run-s/op, and run-ratio against find), and what the
// process took beyond it (oneshot-overhead-s/op: its start, the pods' list
// and the proof of the views). Example:
//
//	go test -run x -bench 'PruneVsFind/files=100k' -benchtime 5x ./test/e2e/
//
// SWEEP_BENCH_SWEEPD="before=/tmp/sweepd-old,after=" measures several
// binaries side by side on the same trees (an empty path: the one built
// from this tree), each metric then prefixed by its label.
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

// benchBinary is one sweepd that BenchmarkPruneVsFind measures, and its
// totals.
type benchBinary struct {
	label, path      string
	total, run       time.Duration
	maxRSS           int64
	minRun, maxRun   time.Duration
	minProc, maxProc time.Duration
}

// benchBinaries returns the binaries of SWEEP_BENCH_SWEEPD, or the one built.
func benchBinaries(b *testing.B, built string) []*benchBinary {
	spec := os.Getenv("SWEEP_BENCH_SWEEPD")
	if spec == "" {
		return []*benchBinary{{path: built}}
	}
	var bins []*benchBinary
	for _, kv := range strings.Split(spec, ",") {
		label, path, ok := strings.Cut(kv, "=")
		if !ok || label == "" {
			b.Fatalf("SWEEP_BENCH_SWEEPD: %q is not label=path", kv)
		}
		if path == "" {
			path = built
		}
		bins = append(bins, &benchBinary{label: label, path: path})
	}
	return bins
}

func benchPruneVsFind(b *testing.B, sandboxes int) {
	built, cp, live := benchNode(b)
	bins := benchBinaries(b, built)
	// A kubelet's defaults: what a one-shot prune's proof waits for on a
	// node.
	if err := controlplane.RestartKubelet(b.Context(), cp.Clientset(b), "node-a", 10*time.Second, 40*time.Second); err != nil {
		b.Fatal(err)
	}
	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		b.Fatalf("no tmpfs at %s: %v", shm, err)
	}
	base, err := os.MkdirTemp(shm, "sweep-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	// Each iteration writes a fresh tree and one copy of it per run:
	// keeping a pristine source as well would take more inodes, and tmpfs
	// runs out of them at 1M files.
	dirs := make([]string, len(bins)+1) // find's, then each binary's
	for i := range dirs {
		dirs[i] = filepath.Join(base, fmt.Sprintf("tree%d", i))
	}
	generate := func() {
		start := time.Now()
		if err := multuscache.Node(dirs[0], sandboxes, live, time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		for _, d := range dirs[1:] {
			if out, err := exec.Command("cp", "-a", dirs[0], d).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v: %s", err, out)
			}
		}
		b.Logf("generated %d x %d files in %s", len(dirs), 3*sandboxes, time.Since(start))
	}

	if _, err := os.Stat("/usr/bin/time"); err != nil {
		b.Fatalf("GNU time measures sweepd's peak RSS (apt-get install time): %v", err)
	}
	rssFile := filepath.Join(b.TempDir(), "rss")
	var findTotal time.Duration
	timed := func(cmd *exec.Cmd) (time.Duration, []byte) {
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return time.Since(t0), out
	}
	// The summary's first line ends with the run's duration: "...; 0.812s".
	runSeconds := regexp.MustCompile(`(?m)^\S+: scanned .*; ([0-9.]+)s$`)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for _, d := range dirs {
			os.RemoveAll(d)
		}
		generate()
		predateViews()
		b.StartTimer()
		// Rotate which goes first, so that none always runs on a warmer
		// cache or a quieter machine.
		n := len(dirs)
		for k := range n {
			j := (i + k) % n
			if j == 0 {
				took, _ := timed(exec.Command("find", dirs[0], "-type", "f", "-delete"))
				findTotal += took
				b.Logf("iteration %d: find -delete %.3fs", i, took.Seconds())
				continue
			}
			bin := bins[j-1]
			// GNU time reports the peak RSS of sweepd alone. The rusage of
			// a child of this process would not: Go starts children with
			// vfork, and Linux keeps the high-water mark of the memory a
			// process had before exec, here the whole test binary's.
			took, out := timed(exec.Command("/usr/bin/time", "-f", "%M", "-o", rssFile, bin.path, "prune", "--kubeconfig="+cp.Kubeconfig,
				"--node-name=node-a", "--multus-dir="+dirs[j], "--min-age=1m", "--log-level=warn"))
			m := runSeconds.FindSubmatch(out)
			if m == nil {
				b.Fatalf("no duration in sweepd's summary:\n%s", out)
			}
			sec, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				b.Fatal(err)
			}
			run := time.Duration(sec * float64(time.Second))
			bin.total += took
			bin.run += run
			if bin.minProc == 0 || took < bin.minProc {
				bin.minProc = took
			}
			bin.maxProc = max(bin.maxProc, took)
			if bin.minRun == 0 || run < bin.minRun {
				bin.minRun = run
			}
			bin.maxRun = max(bin.maxRun, run)
			bin.maxRSS = max(bin.maxRSS, peakRSS(b, rssFile))
			b.Logf("iteration %d: %s process %.3fs, run %.3fs", i, cmp.Or(bin.label, "sweepd"), took.Seconds(), sec)
		}
		b.StopTimer()
		for _, d := range dirs[1:] {
			left, _ := os.ReadDir(filepath.Join(d, "results"))
			if len(left) != 2*len(live) {
				b.Fatalf("%d results files left in %s, want %d", len(left), d, 2*len(live))
			}
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(findTotal.Seconds()/n, "find-s/op")
	for _, bin := range bins {
		// One binary keeps the metrics' names of earlier measurements.
		name, ratio := "sweepd-", ""
		if bin.label != "" {
			name, ratio = bin.label+"-", bin.label+"-"
		}
		b.ReportMetric(bin.total.Seconds()/n, name+"s/op")
		b.ReportMetric(bin.run.Seconds()/n, name+"run-s/op")
		b.ReportMetric(bin.total.Seconds()/findTotal.Seconds(), ratio+"ratio")
		b.ReportMetric(bin.run.Seconds()/findTotal.Seconds(), ratio+"run-ratio")
		b.ReportMetric((bin.total-bin.run).Seconds()/n, ratio+"oneshot-overhead-s/op")
		b.ReportMetric(float64(bin.maxRSS)/1024, name+"peak-RSS-MiB")
		b.Logf("%s: process %.3f-%.3fs, run %.3f-%.3fs", cmp.Or(bin.label, "sweepd"), bin.minProc.Seconds(), bin.maxProc.Seconds(),
			bin.minRun.Seconds(), bin.maxRun.Seconds())
	}
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
