// Command demo shows sweepd's main job without a cluster, in one screen: it
// starts a local control plane (test/framework/controlplane), creates pods
// on a node, writes a multus cache with live and stale entries of the real
// shapes, shows what a dry run would remove and why, runs `sweepd daemon`
// against it, deletes a pod and shows its files go by the daemon's check of
// deleted pods, and prints a few metrics. `make demo` runs it, and so does
// TestDemo (test/e2e), in make test. With -measure it also reports the
// daemon's memory and CPU footprint.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

const node = "demo-node"

func main() {
	sweepd := flag.String("sweepd", "bin/sweepd", "the sweepd binary")
	livePods := flag.Int("pods", 5, "live pods on the node")
	stale := flag.Int("stale", 20, "sandboxes of pods that are gone")
	measure := flag.Duration("measure", 0, "after the demo, watch the idle daemon this long and report its memory and CPU")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *sweepd, *livePods, *stale, *measure); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

// minAge is the demo's --min-age: the files are older, and the machine has
// been up longer (sweep trusts no file to be older than the time since
// boot).
const minAge = 30 * time.Second

func run(ctx context.Context, sweepd string, livePods, stale int, measure time.Duration) error {
	work, err := os.MkdirTemp("", "sweep-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	age, err := fileAge(ctx)
	if err != nil {
		return err
	}

	step("A node's multus cache, and a local API server (etcd, kube-apiserver, in %s)", work)
	cp, err := controlplane.Run(filepath.Join(work, "controlplane"))
	defer cp.Stop()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// What the node's kubelet would do: register its Node with this
	// machine's boot ID and renew its Lease, which sweepd checks before it
	// trusts the node's pods.
	bootID, err := controlplane.MachineBootID()
	if err != nil {
		return err
	}
	if err := controlplane.RegisterNode(ctx, cs, node, bootID, controlplane.FakeRuntime); err != nil {
		return err
	}
	dir := filepath.Join(work, "var/lib/cni/multus")
	old := time.Now().Add(-age)
	var doomed []string
	for i := range livePods {
		p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i)},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		paths, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: p.Name, UID: string(p.UID)}, multuscache.DefaultAttachments(), old)
		if err != nil {
			return err
		}
		if i == 0 {
			doomed = paths
		}
	}
	for i := range stale {
		pod := multuscache.Pod{Namespace: "default", Name: fmt.Sprintf("gone-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
			return err
		}
	}
	for range 3 {
		if _, err := multuscache.FailedAdd(dir, multuscache.NewSandboxID(), old); err != nil {
			return err
		}
	}
	fmt.Printf("node %s: %d live pods, %d deleted pods whose files stayed, 3 failed ADDs (a scratch file each)\n", node, livePods, stale)
	printCache(dir)

	flags := []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=" + node, "--multus-dir=" + dir,
		"--allow-short-intervals", "--min-age=" + minAge.String()}
	step("What would go, and why: sweepd prune --dry-run --limit=4 (every file: -o wide)")
	// A file changed in the second its view is taken is left to the next
	// run (newer-than-view): the files must be older than that.
	time.Sleep(time.Second)
	dry := exec.CommandContext(ctx, sweepd, append([]string{"prune", "--dry-run", "--limit=4"}, flags...)...)
	dry.Stdout = os.Stdout
	var dryLog strings.Builder
	dry.Stderr = &dryLog
	if err := dry.Run(); err != nil {
		return fmt.Errorf("sweepd prune --dry-run: %w\n%s", err, dryLog.String())
	}
	printCache(dir)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort()))
	step("The daemon: sweepd daemon --deleted-pod-grace=2s (hourly runs, the first at start)")
	logPath := filepath.Join(work, "sweepd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(sweepd, append([]string{"daemon", "--deleted-pod-grace=2s", "--metrics-addr=" + addr}, flags...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	// Its log is in a file: the demo shows what an operator looks at.
	failed := func(err error) error {
		data, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		return fmt.Errorf("%w; the daemon's last lines:\n%s", err, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	metrics := "http://" + addr + "/metrics"
	if err := await(ctx, 60*time.Second, "a prune run", func() bool {
		return metric(metrics, "sweep_prune_runs_total") >= 1
	}); err != nil {
		return failed(err)
	}
	fmt.Printf("its first run removed %.0f results files and %.0f scratch files, as the dry run said\n",
		metric(metrics, `sweep_prune_removed_files_total{cache="multus",phase="results"}`),
		metric(metrics, `sweep_prune_removed_files_total{cache="multus",phase="scratch"}`))
	printCache(dir)

	step("kubectl delete pod app-0 --now: its teardown never reaches multus, so its files stay")
	deleted := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, "app-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return err
	}
	if err := await(ctx, 60*time.Second, "app-0's files removed", func() bool {
		for _, p := range doomed {
			if _, err := os.Lstat(p); err == nil {
				return false
			}
		}
		return true
	}); err != nil {
		return failed(err)
	}
	took := time.Since(deleted)
	// The check counts its pod once its run has ended, after the files
	// went.
	if err := await(ctx, 10*time.Second, "count of the check of deleted pods", func() bool {
		return metric(metrics, `sweep_deleted_pods_total{outcome="pruned"}`) >= 1
	}); err != nil {
		return failed(fmt.Errorf("app-0's files went, but not by the check of deleted pods: %w", err))
	}
	fmt.Printf("its check of deleted pods removed app-0's %d files %.1fs after the deletion\n(its grace, 30s by default, and 5s to gather a mass deletion into one check)\n",
		len(doomed), took.Seconds())
	printCache(dir)

	step("A few of its metrics (curl %s)", metrics)
	body, err := get(metrics)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		for _, m := range []string{"sweep_prune_removed_files_total{", "sweep_prune_kept_files{", "sweep_deleted_pods_total{outcome=\"pruned\"}", "sweep_views_proven "} {
			if strings.HasPrefix(line, m) && !strings.HasSuffix(line, " 0") {
				fmt.Println("  " + line)
			}
		}
	}
	if measure > 0 {
		if err := footprint(ctx, cmd.Process.Pid, "http://"+addr, measure); err != nil {
			return err
		}
	}
	fmt.Println("\nDone. On a cluster: README.md's quick start, a dry run first.")
	return nil
}

// fileAge is how old the demo's files are: ten minutes, or less on a
// machine booted since, and more than minAge, waiting for the machine's
// uptime to allow it: sweep trusts no file to be older than the time since
// boot (prune's clock guard).
func fileAge(ctx context.Context) (time.Duration, error) {
	const want, margin = 10 * time.Minute, 15 * time.Second
	up, err := uptime()
	if err != nil {
		return 0, err
	}
	if up < minAge+2*margin {
		wait := minAge + 2*margin - up
		fmt.Printf("this machine booted %s ago, and sweep trusts no file to be older than that: waiting %s\n",
			up.Round(time.Second), wait.Round(time.Second))
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		up += wait
	}
	return min(want, up-margin), nil
}

// uptime is the time since boot, as sweepd's clock guard reads it.
func uptime() (time.Duration, error) {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	secs, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/uptime: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// await polls cond until it holds, or fails after timeout.
func await(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// metric is the value of one series at url, or -1.
func metric(url, series string) float64 {
	body, err := get(url)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func printCache(dir string) {
	results, _ := os.ReadDir(filepath.Join(dir, "results"))
	top, _ := os.ReadDir(dir)
	fmt.Printf("cache: %d results files, %d scratch files\n", len(results), len(top)-1)
}

func footprint(ctx context.Context, pid int, base string, d time.Duration) error {
	step("footprint: watching the idle daemon for %s", d)
	cpu := func() (float64, error) {
		body, err := get(base + "/metrics")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
		return 0, fmt.Errorf("no process_cpu_seconds_total")
	}
	start, err := cpu()
	if err != nil {
		return err
	}
	var maxRSS int
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if rss := vmRSS(pid); rss > maxRSS {
			maxRSS = rss
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	end, err := cpu()
	if err != nil {
		return err
	}
	fmt.Printf("RSS now %.1f MiB, peak while watched %.1f MiB (VmHWM %.1f MiB); CPU %.3f s over %s (includes the runs scheduled every 5s)\n",
		float64(vmRSS(pid))/1024, float64(maxRSS)/1024, float64(procStatus(pid, "VmHWM"))/1024, end-start, d)
	body, err := get(base + "/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		for _, m := range []string{"go_memstats_heap_inuse_bytes ", "go_memstats_sys_bytes ", "go_memstats_stack_inuse_bytes ", "go_goroutines "} {
			if strings.HasPrefix(line, m) {
				fmt.Println("  " + line)
			}
		}
	}
	return nil
}

func vmRSS(pid int) int { return procStatus(pid, "VmRSS") }

// procStatus returns a kB field of /proc/<pid>/status.
func procStatus(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// freePort is a free loopback port for sweepd's metrics, or 9742, its
// default, when none can be found: the demo has no test to fail.
func freePort() int {
	ports, err := framework.FreePorts(1)
	if err != nil {
		return 9742
	}
	return ports[0]
}
