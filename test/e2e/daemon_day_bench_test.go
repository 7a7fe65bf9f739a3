package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// BenchmarkDaemonDay (issue 43) is the daemon's memory over a day on a node
// of 110 pods, as the chart runs it (API liveness, a state directory, its
// own pod in the view, GOMEMLIMIT at the chart's memory limit, info logs),
// against a real API server: the day's 24 scheduled runs, compressed to one
// every 10 seconds, and between two runs four pods replaced (a rollout),
// whose files the checks of deleted pods remove (or find removed by a
// scheduled run). The first hour's pods have the default grace of 30s,
// which their checks wait out. It reports the daemon's
// resident memory after the day and its mean over the day (sampled every
// second), its peak, and its Go heap in use.
//
//	go test ./test/e2e/ -run '^$' -bench DaemonDay -benchtime 1x
//
// SWEEP_BENCH_SWEEPD="before=/tmp/sweepd-old,after=" measures several
// binaries one after the other, as BenchmarkPruneVsFind does, each metric
// then prefixed by its label.
func BenchmarkDaemonDay(b *testing.B) {
	const pods, hours, churn = 110, 24, 4
	bins := benchBinaries(b, testbin.Build(b, "./cmd/sweepd"))
	cp := controlplane.Start(b)
	cs := cp.Clientset(b)
	kubeobj.EnsureServiceAccount(b, cs, "default")
	kubeobj.EnsureNode(b, cs, "node-a")
	for b.Loop() {
		for _, bin := range bins {
			daemonDay(b, cs, cp, bin, pods, hours, churn)
		}
	}
}

// daemonDay is one day of the daemon bin (BenchmarkDaemonDay): the
// timer runs over its 24 hours alone.
func daemonDay(b *testing.B, cs kubernetes.Interface, cp *controlplane.ControlPlane, bin *benchBinary, pods, hours, churn int) {
	b.StopTimer()
	defer b.StartTimer()
	dir := filepath.Join(b.TempDir(), "multus")
	hourAgo := time.Now().Add(-time.Hour)
	self := kubeobj.CreatePod(b, cs, "default", "sweep-day", "node-a")
	live := createPods(b, cs, pods-1)
	if err := multuscache.Node(dir, pods-1, live, hourAgo); err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(b))
	cmd := exec.Command(bin.path, "daemon", "--kubeconfig="+cp.Kubeconfig, "--metrics-addr="+addr, "--log-level=info",
		"--node-name=node-a", "--pod-uid="+self, "--multus-dir="+dir, "--state-dir="+b.TempDir(), "--cni-conf-dir="+b.TempDir(),
		"--schedule=@every 10s", "--allow-short-intervals", "--min-age=15m", "--deleted-pod-grace=1s")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=52428800") // the chart's limits.memory, 50Mi
	d := sweepdproc.StartCmd(b, cmd, addr, filepath.Join(b.TempDir(), "sweepd.log"), "sweepd")
	framework.Eventually(b, 120*time.Second, "the daemon's first run", func() bool { return d.Metric(b, "sweep_prune_runs_total") >= 1 })
	b.StartTimer()
	rssMean := sampleRSS(b, d.Cmd.Process.Pid)
	next := pods
	// The first hour replaces pods made with the default grace, which
	// their checks wait out: a rollout's new pods replace them.
	replacements := append([]multuscache.Pod{}, live[:churn]...)
	for hour := range hours {
		checked := func() float64 {
			return d.Metric(b, `sweep_deleted_pods_total{outcome="pruned"}`) + d.Metric(b, `sweep_deleted_pods_total{outcome="nothing-left"}`)
		}
		done := checked()
		runs := d.Metric(b, "sweep_prune_runs_total")
		for range churn {
			gone := replacements[0]
			replacements = replacements[1:]
			if err := cs.CoreV1().Pods("default").Delete(b.Context(), gone.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("pod-new-%04d", next)
			next++
			// No grace: its check is not held back until a terminating
			// pod's grace ends.
			pod, err := cs.CoreV1().Pods("default").Create(b.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p := multuscache.Pod{Namespace: "default", Name: name, UID: string(pod.UID)}
			replacements = append(replacements, p)
			if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), p, multuscache.DefaultAttachments(), hourAgo); err != nil {
				b.Fatal(err)
			}
		}
		// A check prunes a pod's files, or finds that the scheduled
		// run was first.
		framework.Eventually(b, 90*time.Second, fmt.Sprintf("hour %d: the replaced pods checked", hour), func() bool {
			return checked() >= done+float64(churn)
		})
		framework.Eventually(b, 60*time.Second, fmt.Sprintf("hour %d: a scheduled run", hour), func() bool {
			return d.Metric(b, "sweep_prune_runs_total") > runs
		})
	}
	b.StopTimer()
	meanRSS := rssMean()
	prefix := ""
	if bin.label != "" {
		prefix = bin.label + "-"
	}
	b.ReportMetric(d.Metric(b, "process_resident_memory_bytes")/(1<<20), prefix+"rss-MiB")
	b.ReportMetric(meanRSS/(1<<20), prefix+"rss-mean-MiB")
	b.ReportMetric(vmHWM(b, d.Cmd.Process.Pid)/(1<<20), prefix+"peak-rss-MiB")
	b.ReportMetric(d.Metric(b, "go_memstats_heap_inuse_bytes")/(1<<20), prefix+"heap-inuse-MiB")
	// The binary's pages against the process's own memory.
	b.ReportMetric(procStatus(b, d.Cmd.Process.Pid, "RssFile:")/(1<<20), prefix+"rss-file-MiB")
	b.ReportMetric(procStatus(b, d.Cmd.Process.Pid, "RssAnon:")/(1<<20), prefix+"rss-anon-MiB")
	b.ReportMetric(d.Metric(b, "sweep_prune_runs_total"), prefix+"runs")
	b.ReportMetric(d.Metric(b, "sweep_deleted_pod_checks_total"), prefix+"checks")
	// The next binary's day starts with the same pods, and alone.
	_ = d.Cmd.Process.Kill()
	if err := <-d.Done; err == nil {
		b.Fatal("the killed daemon exited 0")
	}
	d.Done <- nil
	if err := cs.CoreV1().Pods("default").DeleteCollection(b.Context(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
		b.Fatal(err)
	}
}
