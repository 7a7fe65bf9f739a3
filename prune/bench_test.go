package prune_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

func BenchmarkParseCacheFile(b *testing.B) {
	data := multuscache.ResultsJSON(multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.UID("p")}, multuscache.DefaultAttachments()[0])
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := prune.ParseCacheFile(data); err != nil {
			b.Fatal(err)
		}
	}
}

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
		sum, err := prune.Run(b.Context(), idx, prune.Options{Dir: dir, MinAge: time.Minute})
		if err != nil || sum.Removed[prune.PhaseResults] != 2*(10000-110) {
			b.Fatalf("%+v %v", sum, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/30000, "ns/file")
}
