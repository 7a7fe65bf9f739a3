package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// BenchmarkFleetCost (issue 51) measures what a fleet of daemons costs the
// API server: many daemons (local processes, one per simulated node, as in
// BenchmarkHundredDaemons) with the chart's defaults (an hourly schedule,
// --min-age 15m, --deleted-pod-grace 30s, liveness api) against one real
// API server with its audit log, each node's Lease renewed every 10s of 40s
// as a kubelet does. From the audit log, every request with sweepd's user
// agent:
//
//   - at rest, over SWEEP_FLEET_REST (default 10m, longer than a watch's
//     5 to 10 minutes): requests per node-hour, watches started, and reads
//     that may reach etcd (a GET or LIST without a resourceVersion: a
//     quorum or consistent read) counted apart;
//   - per deleted pod: two pods of every node deleted 20s apart, until
//     every daemon has checked them;
//   - a mass deletion: 20 pods of every node deleted at once, its
//     requests per node and how the confirmations spread over time (the
//     nodes' jitter);
//   - the API server's CPU seconds per node-hour at rest, above the same
//     API server's with the kubelets' renewals alone;
//   - the Events the daemons post, their pending ones at their stop
//     included.
//
// SWEEP_FLEET_NODES sets the number of nodes (default 100, 110 pods each);
// SWEEP_BENCH_SWEEPD=label=path,... runs each binary in turn on a control
// plane of its own (an empty path: this tree's), for before and after.
//
//	go test ./test/e2e/ -run '^$' -bench FleetCost -benchtime 1x -timeout 90m
func BenchmarkFleetCost(b *testing.B) {
	nodes := envInt(b, "SWEEP_FLEET_NODES", 100)
	rest := 10 * time.Minute
	if s := os.Getenv("SWEEP_FLEET_REST"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("SWEEP_FLEET_REST: %v", err)
		}
		rest = d
	}
	for _, bin := range benchBinaries(b, testbin.Build(b, "./cmd/sweepd")) {
		name := bin.label
		if name == "" {
			name = "sweepd"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				fleetCost(b, bin.path, nodes, rest)
			}
		})
	}
}

func envInt(b *testing.B, key string, def int) int {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", key, s)
	}
	return n
}

// fleetPods are the pods of each node: the first 20 go in the mass
// deletion, the next 2 one by one, the rest stay.
const (
	fleetPodsPerNode = 110
	fleetMass        = 20
	fleetSingle      = 2
)

// auditCount is what the audit log says of sweepd's requests.
type auditCount struct {
	requests    int // every request but watches
	watches     int // watches started
	relists     int // LISTs and watches that list first (sendInitialEvents)
	consistent  int // GETs and LISTs without a resourceVersion: quorum or consistent reads
	events      int // Events created
	confirms    []time.Time
	byVerbRes   map[string]int
	leaseWrites int // the fake kubelets' Lease updates, for scale
}

// readFleetAudit counts the requests received from since until until
// (zero: no end).
func readFleetAudit(b *testing.B, path string, since, until time.Time) auditCount {
	c := auditCount{byVerbRes: map[string]int{}}
	for _, ev := range controlplane.ReadAudit(b, path) {
		if ev.Received.Before(since) || !until.IsZero() && ev.Received.After(until) {
			continue
		}
		if strings.HasPrefix(ev.UserAgent, "sweep-fake-kubelet") && ev.Verb == "update" && ev.ObjectRef.Resource == "leases" {
			c.leaseWrites++
			continue
		}
		if !ev.By("sweepd") {
			continue
		}
		var q url.Values
		if u, err := url.ParseRequestURI(ev.RequestURI); err == nil {
			q = u.Query()
		}
		if ev.Verb == "watch" {
			if ev.Stage == "ResponseStarted" {
				c.watches++
				c.byVerbRes["watch "+ev.ObjectRef.Resource]++
				if q.Get("sendInitialEvents") == "true" {
					c.relists++
					c.byVerbRes["watch-list "+ev.ObjectRef.Resource]++
				}
			}
			continue
		}
		if !ev.Complete() {
			continue
		}
		c.requests++
		c.byVerbRes[ev.Verb+" "+ev.ObjectRef.Resource]++
		if ev.Verb == "list" {
			c.relists++
		}
		rv := q.Get("resourceVersion")
		if (ev.Verb == "get" || ev.Verb == "list") && rv == "" {
			c.consistent++
		}
		if ev.Verb == "create" && ev.ObjectRef.Resource == "events" {
			c.events++
		}
		if (ev.Verb == "get" || ev.Verb == "list") && ev.ObjectRef.Resource == "pods" {
			c.confirms = append(c.confirms, ev.Received)
		}
	}
	return c
}

func fleetCost(b *testing.B, sweepd string, nodes int, rest time.Duration) {
	b.StopTimer()
	cp := controlplane.Start(b)
	cs := cp.Clientset(b)
	kubeobj.EnsureServiceAccount(b, cs, "default")
	for n := range nodes {
		kubeobj.EnsureNode(b, cs, nodeName(n))
		// A kubelet's defaults: a renewal every 10s of a 40s Lease.
		if err := controlplane.RestartKubelet(b.Context(), cs, nodeName(n), 10*time.Second, 40*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	live := createFleetPods(b, cs, nodes)

	// The API server with the kubelets alone, for a minute.
	cpu0, t0 := cp.APIServerCPUSeconds(), time.Now()
	time.Sleep(time.Minute)
	baseCPU := (cp.APIServerCPUSeconds() - cpu0) / time.Since(t0).Hours() / float64(nodes)

	base, err := os.MkdirTemp("/dev/shm", "sweep-fleet-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	daemons := make([]*sweepdproc.Proc, nodes)
	start := time.Now()
	for n := range nodes {
		dir := filepath.Join(base, nodeName(n))
		// Its live pods' sandboxes and ten of pods long gone.
		if err := multuscache.Node(dir, fleetPodsPerNode+10, live[n], time.Now().Add(-time.Hour)); err != nil {
			b.Fatal(err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(framework.FreePort(b))
		cmd := exec.Command(sweepd, "daemon", "--kubeconfig="+cp.Kubeconfig, "--metrics-addr="+addr, "--node-name="+nodeName(n),
			"--multus-dir="+dir, "--schedule=@every 1h", "--min-age=15m", "--deleted-pod-grace=30s", "--log-level=warn")
		daemons[n] = sweepdproc.StartCmd(b, cmd, addr, filepath.Join(b.TempDir(), "sweepd.log"), nodeName(n))
	}
	for n, d := range daemons {
		framework.Eventually(b, 5*time.Minute, "first run on "+nodeName(n), func() bool {
			return d.Metric(b, `sweep_prune_removed_files_total{cache="multus",phase="results"}`) == 20
		})
	}
	b.Logf("%d daemons ran their first prune in %s", nodes, time.Since(start).Round(time.Second))
	startup := readFleetAudit(b, cp.AuditLog(), start, time.Time{})

	// At rest: the first minute after the start is the start's.
	time.Sleep(time.Minute)
	restStart := time.Now()
	cpu1 := cp.APIServerCPUSeconds()
	b.StartTimer()
	time.Sleep(rest)
	b.StopTimer()
	restTook := time.Since(restStart)
	restCPU := (cp.APIServerCPUSeconds() - cpu1) / restTook.Hours() / float64(nodes)
	atRest := readFleetAudit(b, cp.AuditLog(), restStart, restStart.Add(restTook))
	nodeHours := float64(nodes) * restTook.Hours()
	var rssSum, rssMax, anonSum, fileSum float64
	for _, d := range daemons {
		rss := d.Metric(b, "process_resident_memory_bytes") / (1 << 20)
		rssSum += rss
		rssMax = max(rssMax, rss)
		anonSum += procStatus(b, d.Cmd.Process.Pid, "RssAnon:") / (1 << 20)
		fileSum += procStatus(b, d.Cmd.Process.Pid, "RssFile:") / (1 << 20)
	}

	// Deleted pods: two of each node, 20s apart.
	singleStart := time.Now()
	for i := range fleetSingle {
		deleteFleetPods(b, cs, fmt.Sprintf("single-%d", i))
		if i < fleetSingle-1 {
			time.Sleep(20 * time.Second)
		}
	}
	awaitChecked(b, daemons, fleetSingle)
	single := readFleetAudit(b, cp.AuditLog(), singleStart, time.Time{})

	// A mass deletion: 20 pods of every node at once.
	massStart := time.Now()
	deleteFleetPods(b, cs, "mass")
	awaitChecked(b, daemons, fleetSingle+fleetMass)
	mass := readFleetAudit(b, cp.AuditLog(), massStart, time.Time{})

	// The daemons stop, and post the Events they counted.
	stopStart := time.Now()
	for _, d := range daemons {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range daemons {
		err := <-d.Done
		d.Done <- err
	}
	stopped := readFleetAudit(b, cp.AuditLog(), stopStart, time.Time{})

	deletedPods := float64(nodes * fleetSingle)
	b.ReportMetric(float64(atRest.requests)/nodeHours, "rest-requests/node-h")
	b.ReportMetric(float64(atRest.watches)/nodeHours, "rest-watches/node-h")
	b.ReportMetric(float64(atRest.relists)/nodeHours, "rest-relists/node-h")
	b.ReportMetric(float64(atRest.consistent)/nodeHours, "rest-etcd-reads/node-h")
	b.ReportMetric(restCPU-baseCPU, "apiserver-cpu-s/node-h")
	b.ReportMetric(float64(single.requests)/deletedPods, "requests/deleted-pod")
	b.ReportMetric(float64(mass.requests)/float64(nodes), "mass-requests/node")
	b.ReportMetric(spread(mass.confirms), "mass-confirm-spread-s")
	b.ReportMetric(rssSum/float64(nodes), "daemon-RSS-MiB-mean")
	b.ReportMetric(rssMax, "daemon-RSS-MiB-max")
	b.Logf("start: %d requests (%v), %d watches", startup.requests, startup.byVerbRes, startup.watches)
	b.Logf("at rest %s, %d nodes: %d requests %v, %d watches started, %d relists (LISTs, or watches that list first), %d that may reach etcd; the kubelets wrote %d Lease updates (%.0f a node-hour)",
		restTook.Round(time.Second), nodes, atRest.requests, atRest.byVerbRes, atRest.watches, atRest.relists, atRest.consistent,
		atRest.leaseWrites, float64(atRest.leaseWrites)/nodeHours)
	b.Logf("API server CPU: %.3f s a node-hour with the daemons, %.3f with the kubelets alone", restCPU, baseCPU)
	b.Logf("%d pods deleted 20s apart: %d requests %v (%d that may reach etcd, %d Events)",
		int(deletedPods), single.requests, single.byVerbRes, single.consistent, single.events)
	b.Logf("mass deletion of %d pods: %d requests %v (%d that may reach etcd, %d Events); confirmations spread over %.1fs",
		nodes*fleetMass, mass.requests, mass.byVerbRes, mass.consistent, mass.events, spread(mass.confirms))
	b.Logf("at the daemons' stop: %d requests %v", stopped.requests, stopped.byVerbRes)
	b.Logf("daemon RSS mean %.1f MiB (anonymous %.1f, the binary's pages %.1f), max %.1f MiB",
		rssSum/float64(nodes), anonSum/float64(nodes), fileSum/float64(nodes), rssMax)
	b.StartTimer()
}

// spread is the time between the first and the last of ts, in seconds.
func spread(ts []time.Time) float64 {
	if len(ts) < 2 {
		return 0
	}
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts[len(ts)-1].Sub(ts[0]).Seconds()
}

// createFleetPods makes each node's pods, labelled by the phase that
// deletes them, and returns them by node.
func createFleetPods(b *testing.B, cs kubernetes.Interface, nodes int) [][]multuscache.Pod {
	live := make([][]multuscache.Pod, nodes)
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for n := range nodes {
		wg.Go(func() {
			for i := range fleetPodsPerNode {
				phase := "stay"
				switch {
				case i < fleetMass:
					phase = "mass"
				case i < fleetMass+fleetSingle:
					phase = fmt.Sprintf("single-%d", i-fleetMass)
				}
				name := fmt.Sprintf("pod-%03d-%03d", n, i)
				p, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"phase": phase}},
					Spec:       corev1.PodSpec{NodeName: nodeName(n), Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				live[n] = append(live[n], multuscache.Pod{Namespace: "default", Name: name, UID: string(p.UID)})
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

// deleteFleetPods deletes the pods of a phase, on every node, at once.
func deleteFleetPods(b *testing.B, cs kubernetes.Interface, phase string) {
	if err := cs.CoreV1().Pods("default").DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: "phase=" + phase}); err != nil {
		b.Fatal(err)
	}
}

// awaitChecked waits until every daemon has an outcome for want deleted
// pods.
func awaitChecked(b *testing.B, daemons []*sweepdproc.Proc, want int) {
	for _, d := range daemons {
		framework.Eventually(b, 5*time.Minute, "the checks of deleted pods", func() bool {
			return d.Metric(b, `sweep_deleted_pods_total{outcome="pruned"}`)+d.Metric(b, `sweep_deleted_pods_total{outcome="nothing-left"}`) >= float64(want)
		})
	}
}
