package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// BenchmarkHundredDaemons is the measured run of the daemon at cluster
// scale: 100 sweepd daemons (simulated nodes, as local processes) against
// one API server holding 10,000 pods, 100 per node. It checks that each
// daemon's view holds only its node's pods and that prune cycles make no API
// request, and reports the API server's requests from the daemons while
// starting and during the cycles, and the daemons' memory. Run it with
//
//	go test -run x -bench HundredDaemons -benchtime 1x ./test/e2e/
func BenchmarkHundredDaemons(b *testing.B) {
	const nodes, perNode = 100, 100
	cp := controlplane.Start(b)
	cs := cp.Clientset(b)
	kubeobj.EnsureServiceAccount(b, cs, "default")

	for n := range nodes {
		kubeobj.EnsureNode(b, cs, nodeName(n))
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	uids := make([][]string, nodes)
	for n := range nodes {
		wg.Go(func() {
			for i := range perNode {
				p, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d-%03d", n, i)},
					Spec:       corev1.PodSpec{NodeName: nodeName(n), Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				uids[n] = append(uids[n], string(p.UID))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("created %d pods in %s", nodes*perNode, time.Since(start))

	base, err := os.MkdirTemp("/dev/shm", "sweep-scale-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	daemons := make([]*sweepdproc.Proc, nodes)
	before := sweepdRequests(b, cp.AuditLog())
	start = time.Now()
	for n := range nodes {
		dir := filepath.Join(base, nodeName(n))
		live := make([]multuscache.Pod, perNode)
		for i, uid := range uids[n] {
			live[i] = multuscache.Pod{Namespace: "default", Name: fmt.Sprintf("pod-%03d-%03d", n, i), UID: uid}
		}
		// Each node: its live pods' sandboxes and ten of pods long gone.
		if err := multuscache.Node(dir, perNode+10, live, time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		daemons[n] = sweepdproc.Start(b, cp.Kubeconfig, "--node-name="+nodeName(n), "--multus-dir="+dir, "--schedule=@every 2s", "--min-age=1m", "--log-level=warn")
	}
	for n, d := range daemons {
		framework.Eventually(b, 120*time.Second, "daemon "+nodeName(n)+" ready", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
	}
	b.Logf("%d daemons ready in %s", nodes, time.Since(start))
	startup := sweepdRequests(b, cp.AuditLog()) - before
	for n, d := range daemons {
		framework.Eventually(b, 60*time.Second, "first prune on "+nodeName(n), func() bool {
			return d.Metric(b, `sweep_prune_removed_files_total{cache="multus",phase="results"}`) == 20
		})
		if got := d.Metric(b, "sweep_pods"); got != perNode {
			b.Fatalf("%s holds %v pods, want %d", nodeName(n), got, perNode)
		}
	}

	b.ResetTimer()
	runs0 := totalRuns(b, daemons)
	steady, steadyLease := sweepdAudit(b, cp.AuditLog())
	const window = 10 * time.Second
	time.Sleep(window)
	cycles := totalRuns(b, daemons) - runs0
	requests, leaseReads := sweepdAudit(b, cp.AuditLog())
	requests, leaseReads = requests-steady, leaseReads-steadyLease
	b.StopTimer()

	var rssSum, rssMax float64
	for _, d := range daemons {
		rss := d.Metric(b, "process_resident_memory_bytes") / (1 << 20)
		rssSum += rss
		rssMax = max(rssMax, rss)
	}
	b.ReportMetric(float64(startup), "startup-requests")
	b.ReportMetric(cycles, "cycles")
	b.ReportMetric(float64(requests), "requests-during-cycles")
	// Each daemon reads its kubelet's Lease while it proves and prunes, a
	// quarter of the Lease's duration apart once renewals are seen: a cost
	// per daemon and second, not per cycle.
	leasePerDaemonMinute := float64(leaseReads) / nodes / window.Minutes()
	b.ReportMetric(leasePerDaemonMinute, "lease-reads/daemon/min")
	b.ReportMetric(rssSum/float64(nodes), "daemon-RSS-MiB-mean")
	b.ReportMetric(rssMax, "daemon-RSS-MiB-max")
	if requests != 0 {
		b.Errorf("%d API requests during %v prune cycles, want 0", requests, cycles)
	}
	b.Logf("API server: %d requests from the daemons to start, %d during %v prune cycles and %d Lease reads (%.1f a daemon a minute); daemon RSS mean %.1f MiB, max %.1f MiB",
		startup, requests, cycles, leaseReads, leasePerDaemonMinute, rssSum/float64(nodes), rssMax)
}

func nodeName(n int) string { return "node-" + strconv.Itoa(1000 + n)[1:] }

func totalRuns(b *testing.B, daemons []*sweepdproc.Proc) float64 {
	var sum float64
	for _, d := range daemons {
		sum += d.Metric(b, "sweep_prune_runs_total")
	}
	return sum
}
