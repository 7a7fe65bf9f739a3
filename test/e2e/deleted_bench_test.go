package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// BenchmarkMassDeletion (issue 35) measures what the checks of deleted pods
// cost when 1,000 pods of one node are deleted at once (a namespace or a
// Deployment deleted, a drain): the daemon's API requests (the audit log's,
// the node Lease's reads apart, which do not depend on the deletions), its
// checks (targeted runs), CPU time and memory, and the time until the last
// pod's files are gone. The daemon runs with the chart's defaults (an hourly
// schedule, --min-age 15m, --deleted-pod-grace 30s), and again without the
// checks (--deleted-pod-grace=0s) for the baseline of its memory and
// requests; the pods' files are an hour old, as a long-running workload's.
//
//	go test ./test/e2e/ -run '^$' -bench MassDeletion -benchtime 1x
func BenchmarkMassDeletion(b *testing.B) {
	const pods = 1000
	cp := controlplane.Start(b)
	cs := cp.Clientset(b)
	kubeobj.EnsureServiceAccount(b, cs, "default")
	kubeobj.EnsureNode(b, cs, "node-a")
	base, err := os.MkdirTemp("/dev/shm", "sweep-mass-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	for _, grace := range []string{"30s", "0s"} {
		b.Run("grace="+grace, func(b *testing.B) { massDeletion(b, cs, cp, filepath.Join(base, grace), grace, pods) })
	}
}

// massDeletion deletes pods pods of node-a at once, with sweepd's
// --deleted-pod-grace grace: 0s is the daemon without the checks, whose
// memory and requests are the baseline (the files then wait for the
// scheduled run).
func massDeletion(b *testing.B, cs kubernetes.Interface, cp *controlplane.ControlPlane, dir, grace string, pods int) {
	for b.Loop() {
		b.StopTimer()
		live := createPods(b, cs, pods)
		if err := multuscache.Node(dir, pods, live, time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		d := sweepdproc.Start(b, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1h", "--min-age=15m",
			"--log-level=info", "--deleted-pod-grace="+grace)
		framework.Eventually(b, 120*time.Second, "the daemon's first run", func() bool { return d.Metric(b, "sweep_prune_runs_total") >= 1 })
		if got := d.Metric(b, "sweep_pods"); got != float64(pods) {
			b.Fatalf("the view holds %v pods, want %d", got, pods)
		}
		rssBefore := d.Metric(b, "process_resident_memory_bytes")
		cpuBefore := d.Metric(b, "process_cpu_seconds_total")
		hwmBefore := vmHWM(b, d.Cmd.Process.Pid)
		reqBefore, _ := sweepdAudit(b, cp.AuditLog())

		b.StartTimer()
		start := time.Now()
		if err := cs.CoreV1().Pods("default").DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
			metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
			b.Fatal(err)
		}
		framework.Eventually(b, 60*time.Second, "the view empty", func() bool { return d.Metric(b, "sweep_pods") == 0 })
		if grace != "0s" {
			framework.Eventually(b, 5*time.Minute, "every deleted pod's files removed", func() bool {
				ents, err := os.ReadDir(filepath.Join(dir, "results"))
				if err != nil || len(ents) > 0 {
					return false
				}
				top, err := os.ReadDir(dir)
				return err == nil && len(top) == 1 // results/ alone
			})
			b.ReportMetric(time.Since(start).Seconds(), "seconds-to-clear")
			// The counters are added to when a check ends, after its
			// removals.
			framework.Eventually(b, 30*time.Second, "every pod's outcome counted", func() bool {
				return d.Metric(b, `sweep_deleted_pods_total{outcome="pruned"}`) == float64(pods)
			})
			b.ReportMetric(d.Metric(b, `sweep_deleted_pod_lookups_total{result="gone"}`), "pods-confirmed")
			b.ReportMetric(d.Metric(b, "sweep_deleted_pod_checks_total"), "checks")
			b.ReportMetric(d.Metric(b, "sweep_deleted_pod_files_read_total"), "files-read")
			b.ReportMetric(d.Metric(b, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`), "results-removed")
		}
		b.StopTimer()
		reqAfter, _ := sweepdAudit(b, cp.AuditLog())
		b.ReportMetric(float64(reqAfter-reqBefore), "api-requests")
		b.ReportMetric(d.Metric(b, "process_cpu_seconds_total")-cpuBefore, "cpu-s")
		b.ReportMetric(rssBefore/(1<<20), "rss-before-MiB")
		b.ReportMetric(d.Metric(b, "process_resident_memory_bytes")/(1<<20), "rss-after-MiB")
		b.ReportMetric(hwmBefore/(1<<20), "peak-rss-before-MiB")
		b.ReportMetric(vmHWM(b, d.Cmd.Process.Pid)/(1<<20), "peak-rss-after-MiB")
		b.StartTimer()
	}
}

// createPods creates n pods on node-a, ten at a time.
func createPods(b *testing.B, cs kubernetes.Interface, n int) []multuscache.Pod {
	live := make([]multuscache.Pod, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 10 {
		wg.Go(func() {
			for i := w; i < n; i += 10 {
				name := fmt.Sprintf("pod-%04d", i)
				p, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				live[i] = multuscache.Pod{Namespace: "default", Name: name, UID: string(p.UID)}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return live
}

// vmHWM is a process's peak resident set size, in bytes.
func vmHWM(b *testing.B, pid int) float64 { return procStatus(b, pid, "VmHWM:") }

// procStatus reads a size in bytes from a line of /proc/PID/status, by its
// key ("VmHWM:", "RssAnon:").
func procStatus(b *testing.B, pid int, key string) float64 {
	v, err := readProcStatus(pid, key)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func readProcStatus(pid int, key string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// sampleRSS reads a process's resident memory every second until the
// function it returns is called, which returns their mean in bytes: what
// the process holds over a time, not at the moment a benchmark ends (a
// daemon's run ends by unmapping what it can).
func sampleRSS(b *testing.B, pid int) func() float64 {
	type result struct {
		mean float64
		err  error
	}
	stop, done := make(chan struct{}), make(chan result, 1)
	go func() {
		var sum float64
		var n int
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				if n == 0 {
					done <- result{err: errors.New("no sample of the resident memory")}
				} else {
					done <- result{mean: sum / float64(n)}
				}
				return
			case <-tick.C:
			}
			v, err := readProcStatus(pid, "VmRSS:")
			if err != nil {
				done <- result{err: err}
				return
			}
			sum += v
			n++
		}
	}()
	return func() float64 {
		close(stop)
		r := <-done
		if r.err != nil {
			b.Fatal(r.err)
		}
		return r.mean
	}
}
