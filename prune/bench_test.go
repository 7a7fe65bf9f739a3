package prune_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// BenchmarkRun prunes a 10,000-sandbox cache (30,000 files, 110 live) on
// tmpfs per iteration; the tree is copied outside the timer.
func BenchmarkRun(b *testing.B) {
	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		shm = b.TempDir()
	}
	base, err := os.MkdirTemp(shm, "sweep-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	src := filepath.Join(base, "src")
	live := make([]multuscache.Pod, 110)
	refs := make([]prune.PodRef, len(live))
	for i := range live {
		live[i] = multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.NewUID()}
		refs[i] = prune.PodRef{Namespace: "default", Name: "live", UID: live[i].UID}
	}
	if err := multuscache.Node(src, 10000, live, time.Now().Add(-time.Hour)); err != nil {
		b.Fatal(err)
	}
	idx := prune.NewPodSet(refs)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		dir := filepath.Join(base, "run")
		os.RemoveAll(dir)
		if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		b.StartTimer()
		sum, err := prune.Run(b.Context(), prune.Views{Pods: idx}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
		if err != nil || sum.Removed[prune.PhaseResults] != 2*(10000-110) {
			b.Fatalf("%+v %v", sum, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/30000, "ns/file")
}

// BenchmarkReleaseReservations releases the orphaned reservations of a
// /20 host-local pool (4,000 addresses, 100 of live sandboxes) after the
// prune of an empty multus cache, on tmpfs; each release takes and drops
// host-local's lock.
func BenchmarkReleaseReservations(b *testing.B) {
	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		shm = b.TempDir()
	}
	base, err := os.MkdirTemp(shm, "sweep-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	multus := filepath.Join(base, "multus")
	if err := os.MkdirAll(filepath.Join(multus, "results"), 0o755); err != nil {
		b.Fatal(err)
	}
	const n, live = 4000, 100
	old := time.Now().Add(-time.Hour)
	src := filepath.Join(base, "src", "net1")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	var liveIDs []string
	for i := range n {
		id := multuscache.NewSandboxID()
		if i < live {
			liveIDs = append(liveIDs, id)
		}
		p := filepath.Join(src, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
		if err := os.WriteFile(p, []byte(id+"\r\nnet1"), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
	}
	sandboxes := newSandboxes(liveIDs...)
	for b.Loop() {
		b.StopTimer()
		data := filepath.Join(base, "run")
		os.RemoveAll(data)
		if out, err := exec.Command("cp", "-a", filepath.Dir(src), data).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		b.StartTimer()
		sum, err := prune.Run(b.Context(), prune.Views{Sandboxes: sandboxes}, prune.Options{Config: prune.Config{Dir: multus, MinAge: time.Minute, HostLocalDirs: []string{data}, HostLocalNetworks: []string{"net1"}}})
		if err != nil || sum.Reservations.Released != n-live {
			b.Fatalf("%+v %v", sum.Reservations, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/reservation")
}
