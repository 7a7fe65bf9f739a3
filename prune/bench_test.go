package prune_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// BenchmarkRun prunes a 10,000-sandbox cache (30,000 files, 110 live) on
// tmpfs per iteration; the tree is copied outside the timer. Its
// sub-benchmarks measure the same tree deleted by `find -delete`, and by
// the floor of the prune's rules: only the system calls they need (results
// files: open without following, fstat, read, close, the re-check's
// fstatat, unlink; scratch files: fstatat, unlink), on as many goroutines,
// with no parsing, planning or reporting.
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
	each := func(b *testing.B, run func(dir string)) {
		for b.Loop() {
			b.StopTimer()
			dir := filepath.Join(base, "run")
			os.RemoveAll(dir)
			if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			b.StartTimer()
			run(dir)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/30000, "ns/file")
	}
	b.Run("prune", func(b *testing.B) {
		each(b, func(dir string) {
			sum, err := prune.Run(b.Context(), prune.Views{Pods: idx}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
			if err != nil || sum.Removed[prune.PhaseResults] != 2*(10000-110) {
				b.Fatalf("%+v %v", sum, err)
			}
			b.ReportMetric(float64(prune.Opened(sum)), "opened/op")
			b.ReportMetric(float64(prune.Carried(sum)), "unread/op")
		})
	})
	b.Run("find-delete", func(b *testing.B) {
		each(b, func(dir string) {
			if out, err := exec.Command("find", dir, "-type", "f", "-delete").CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		})
	})
	b.Run("syscall-floor", func(b *testing.B) {
		each(b, func(dir string) {
			syscallFloor(b, filepath.Join(dir, "results"), true)
			syscallFloor(b, dir, false)
		})
	})
}

// syscallFloor makes, for every regular file of dir, the system calls the
// prune's rules need to remove it, on GOMAXPROCS goroutines fed batches of
// names as the prune's workers are.
func syscallFloor(b *testing.B, dir string, results bool) {
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	fd := int(d.Fd())
	batches := make(chan []string, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			buf := make([]byte, prune.DefaultMaxFileSize)
			var st, now unix.Stat_t
			for batch := range batches {
				for _, name := range batch {
					if results {
						f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOATIME, 0)
						if err != nil {
							continue
						}
						_ = unix.Fstat(f, &st)
						_, _ = unix.Read(f, buf[:min(st.Size, int64(len(buf)))])
						_ = unix.Close(f)
						_ = unix.Fstatat(fd, name, &now, unix.AT_SYMLINK_NOFOLLOW)
					} else if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
						continue
					}
					_ = unix.Unlinkat(fd, name, 0)
				}
			}
		})
	}
	for {
		names, err := d.Readdirnames(256)
		if len(names) > 0 {
			batches <- names
		}
		if err != nil {
			break
		}
	}
	close(batches)
	wg.Wait()
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
