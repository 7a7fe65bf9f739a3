package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
	"github.com/sweep-k8s/sweep/test/framework/witness"
)

// pruneSummary is the part of `sweepd prune --output=json` the tests read.
type pruneSummary struct {
	Removed   map[string]int `json:"removed"`
	RemovedBy map[string]int `json:"removedBy"`
	Kept      map[string]int `json:"kept"`
}

// runPrune runs `sweepd prune` with args and returns its summary (when it
// printed one), stderr and exit status.
func runPrune(t *testing.T, env []string, args ...string) (pruneSummary, string, int) {
	t.Helper()
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cmd := exec.Command(sweepd, append([]string{"prune", "--output=json"}, sweepdproc.WithMinAge(args)...)...)
	cmd.Env = append(os.Environ(), env...)
	out, stderr, code := runCmd(t, cmd)
	t.Logf("sweepd prune %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
	var sum pruneSummary
	if len(out) > 0 {
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatalf("summary: %v", err)
		}
	}
	return sum, stderr, code
}

// sandboxFiles writes one sandbox's files and returns their paths.
func sandboxFiles(t *testing.T, dir, id string, pod multuscache.Pod, mtime time.Time) []string {
	t.Helper()
	paths, err := multuscache.Sandbox(dir, id, pod, multuscache.DefaultAttachments(), mtime)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func writeBootID(t *testing.T, path, id string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// bootNode fakes a boot of node with the boot ID id: the boot ID file that
// sweepd reads (--boot-id-file) says id, and so does the Node, as its
// kubelet reports it when it starts.
func bootNode(t *testing.T, cs kubernetes.Interface, node, path, id string) {
	t.Helper()
	writeBootID(t, path, id)
	setNodeBootID(t, cs, node, id)
}

// TestPruneRebootAware fakes a reboot: the boot ID file changes between two
// runs. Live pods whose cache files were recorded under boot A lose them
// once the boot ID says B; the files of the same pods' new sandboxes stay.
func TestPruneRebootAware(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	dir := filepath.Join(t.TempDir(), "multus")
	state := filepath.Join(t.TempDir(), "state")
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	old := time.Now().Add(-time.Hour)
	pods := map[string]multuscache.Pod{}
	for _, name := range []string{"web", "db"} {
		pods[name] = multuscache.Pod{Namespace: "default", Name: name, UID: kubeobj.CreatePod(t, cs, "default", name, "node-a")}
	}
	base := []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=node-a", "--multus-dir=" + dir, "--min-age=2m", "--boot-id-file=" + bootFile}

	// Boot A: the pods' first sandboxes. A run records them.
	bootNode(t, cs, "node-a", bootFile, "7d4f0c6e-aaaa-4b1e-8f3a-00000000000a")
	var beforeReboot []string
	for _, name := range []string{"web", "db"} {
		beforeReboot = append(beforeReboot, sandboxFiles(t, dir, multuscache.NewSandboxID(), pods[name], old)...)
	}
	if sum, _, code := runPrune(t, nil, append(base, "--state-dir="+state)...); code != 0 || sum.Removed["results"] != 0 {
		t.Fatalf("boot A: exit %d, summary %+v", code, sum)
	}
	framework.CheckFiles(t, "boot A", beforeReboot, true)
	if _, err := os.Stat(filepath.Join(state, "boot-record.json")); err != nil {
		t.Fatalf("no boot record: %v", err)
	}

	// Reboot: boot B. The kubelet made new sandboxes for the same pods.
	bootNode(t, cs, "node-a", bootFile, "7d4f0c6e-bbbb-4b1e-8f3a-00000000000b")
	var afterReboot []string
	for _, name := range []string{"web", "db"} {
		afterReboot = append(afterReboot, sandboxFiles(t, dir, multuscache.NewSandboxID(), pods[name], time.Now())...)
	}

	t.Run("--reboot-aware=false keeps every file of a live pod", func(t *testing.T) {
		sum, _, code := runPrune(t, nil, append(base, "--state-dir="+state, "--reboot-aware=false")...)
		if code != 0 || sum.Removed["results"]+sum.Removed["scratch"] != 0 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "not reboot-aware", append(beforeReboot, afterReboot...), true)
	})

	t.Run("without --state-dir it is off", func(t *testing.T) {
		sum, _, code := runPrune(t, nil, base...)
		if code != 0 || sum.Removed["results"]+sum.Removed["scratch"] != 0 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		if _, _, code := runPrune(t, nil, append(base, "--reboot-aware")...); code != 2 {
			t.Fatalf("--reboot-aware without --state-dir: exit %d, want 2", code)
		}
	})

	t.Run("dry run reports and leaves files and record alone", func(t *testing.T) {
		record, _ := os.ReadFile(filepath.Join(state, "boot-record.json"))
		sum, _, code := runPrune(t, nil, append(base, "--state-dir="+state, "--dry-run")...)
		if code != 0 || sum.RemovedBy["earlier-boot"] != 6 || sum.Removed["scratch"] != 2 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "dry run", append(beforeReboot, afterReboot...), true)
		if after, _ := os.ReadFile(filepath.Join(state, "boot-record.json")); !bytes.Equal(after, record) {
			t.Fatal("dry run changed the boot record")
		}
	})

	t.Run("an earlier boot's file goes only once as old as any other", func(t *testing.T) {
		// A boot ID can change without a reboot while an ADD is still
		// running: the age rules apply to earlier-boot files too. Here the
		// clock jumped back at the boot, and the old files look as if
		// written in the future (and a second ago) until it catches up.
		for _, mtime := range []time.Time{time.Now().Add(24 * time.Hour), time.Now().Add(-time.Second)} {
			for _, p := range beforeReboot {
				if err := os.Chtimes(p, mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			sum, _, code := runPrune(t, nil, append(base, "--state-dir="+state)...)
			if code != 0 || sum.Removed["results"]+sum.Removed["scratch"] != 0 || sum.Kept["too-young"] != 4 {
				t.Fatalf("mtime %s: exit %d, summary %+v", mtime, code, sum)
			}
			framework.CheckFiles(t, "earlier boot, young", beforeReboot, true)
		}
		for _, p := range beforeReboot {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("the earlier boot's files go, the new sandboxes' stay", func(t *testing.T) {
		sum, _, code := runPrune(t, nil, append(base, "--state-dir="+state)...)
		// 4 results and 2 scratch files.
		if code != 0 || sum.RemovedBy["earlier-boot"] != 6 || sum.Kept["pod-live"] != 4 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "earlier boot", beforeReboot, false)
		framework.CheckFiles(t, "this boot", afterReboot, true)
		// Again in the same boot: nothing more.
		sum, _, code = runPrune(t, nil, append(base, "--state-dir="+state)...)
		if code != 0 || sum.Removed["results"]+sum.Removed["scratch"] != 0 {
			t.Fatalf("second run: exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "this boot, second run", afterReboot, true)
	})

	t.Run("corrupt record: warning, nothing earlier-boot, record rewritten", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(state, "boot-record.json"), []byte(`{"bootID":"x","sandboxes":["nope"`), 0o600); err != nil {
			t.Fatal(err)
		}
		bootNode(t, cs, "node-a", bootFile, "7d4f0c6e-cccc-4b1e-8f3a-00000000000c")
		sum, stderr, code := runPrune(t, nil, append(base, "--state-dir="+state)...)
		if code != 0 || sum.Removed["results"]+sum.Removed["scratch"] != 0 || !strings.Contains(stderr, "boot record unusable") {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "corrupt record", afterReboot, true)
		data, err := os.ReadFile(filepath.Join(state, "boot-record.json"))
		if err != nil || !strings.Contains(string(data), "cccc") {
			t.Fatalf("record not rewritten: %s, %v", data, err)
		}
	})

	t.Run("unwritable state directory: the prune goes on", func(t *testing.T) {
		blocked := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(blocked, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		sum, stderr, code := runPrune(t, nil, append(base, "--state-dir="+filepath.Join(blocked, "state"))...)
		if code != 0 || sum.Kept["pod-live"] != 4 || !strings.Contains(stderr, "cannot write the boot record") {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
	})
}

// TestPruneCRILiveness runs `sweepd prune --liveness=cri` against a fake
// container runtime that serves the real CRI gRPC API, with no kubeconfig
// and no node name: no API server is involved at all.
func TestPruneCRILiveness(t *testing.T) {
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: "5a0c2b1e-0000-4000-8000-000000000001"}
	ready, notReady, gone := multuscache.NewSandboxID(), multuscache.NewSandboxID(), multuscache.NewSandboxID()
	readyFiles := sandboxFiles(t, dir, ready, pod, old)
	notReadyFiles := sandboxFiles(t, dir, notReady, pod, old)
	goneFiles := sandboxFiles(t, dir, gone, pod, old)
	rt.SetSandboxes(ready)
	rt.Add(notReady, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	// Any kubeconfig would fail: none must be read.
	env := []string{"KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME="}
	base := []string{"--liveness=cri", "--expect-runtime=fakecri", "--cri-endpoint=" + rt.Endpoint, "--multus-dir=" + dir, "--min-age=2m", "--cri-timeout=1s"}

	t.Run("runtime stopped: nothing deleted, exit 1", func(t *testing.T) {
		rt.Stop()
		defer rt.Resume(t)
		_, stderr, code := runPrune(t, env, base...)
		if code != 1 || !strings.Contains(stderr, "nothing deleted") {
			t.Fatalf("exit %d", code)
		}
		framework.CheckFiles(t, "runtime stopped", goneFiles, true)
	})

	t.Run("runtime hangs: nothing deleted, exit 1 after --cri-timeout", func(t *testing.T) {
		rt.SetHang(true)
		defer rt.SetHang(false)
		start := time.Now()
		_, _, code := runPrune(t, env, base...)
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %s", d)
		}
		framework.CheckFiles(t, "runtime hangs", goneFiles, true)
	})

	t.Run("dry run", func(t *testing.T) {
		sum, _, code := runPrune(t, env, append(base, "--dry-run")...)
		if code != 0 || sum.RemovedBy["sandbox-gone"] != 2 || sum.Removed["scratch"] != 1 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "dry run", goneFiles, true)
	})

	t.Run("the sandbox the runtime does not know goes", func(t *testing.T) {
		sum, _, code := runPrune(t, env, base...)
		if code != 0 || sum.RemovedBy["sandbox-gone"] != 2 || sum.Kept["sandbox-live"] != 4 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "unknown sandbox", goneFiles, false)
		framework.CheckFiles(t, "ready sandbox", readyFiles, true)
		framework.CheckFiles(t, "NOTREADY sandbox", notReadyFiles, true)
	})

	t.Run("bad endpoint is a usage error", func(t *testing.T) {
		if _, _, code := runPrune(t, env, "--liveness=cri", "--cri-endpoint=/run/containerd/containerd.sock", "--multus-dir="+dir); code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		if _, _, code := runPrune(t, env, "--liveness=kubelet", "--multus-dir="+dir); code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
	})
}

// TestPruneBothLiveness: with --liveness=both a file goes only when its pod
// is gone from the API server and its sandbox from the runtime.
func TestPruneBothLiveness(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")}
	gonePod := multuscache.Pod{Namespace: "default", Name: "gone", UID: "5a0c2b1e-0000-4000-8000-00000000dead"}
	files := map[string][]string{}
	var known []string
	for _, c := range []struct {
		name    string
		pod     multuscache.Pod
		runtime bool
	}{{"live pod, known sandbox", live, true}, {"live pod, unknown sandbox", live, false}, {"gone pod, known sandbox", gonePod, true}, {"gone pod, unknown sandbox", gonePod, false}} {
		id := multuscache.NewSandboxID()
		files[c.name] = sandboxFiles(t, dir, id, c.pod, old)
		if c.runtime {
			known = append(known, id)
		}
	}
	rt.SetSandboxes(known...)
	base := []string{"--liveness=both", "--kubeconfig=" + cp.Kubeconfig, "--node-name=node-a", "--cri-endpoint=" + rt.Endpoint, "--multus-dir=" + dir, "--min-age=2m", "--cri-timeout=1s"}

	rt.SetHang(true)
	if _, _, code := runPrune(t, nil, base...); code != 1 {
		t.Fatalf("runtime hangs: exit %d, want 1", code)
	}
	rt.SetHang(false)
	for _, f := range files {
		framework.CheckFiles(t, "runtime hangs", f, true)
	}

	sum, _, code := runPrune(t, nil, base...)
	if code != 0 || sum.RemovedBy["pod-gone"] != 2 || sum.Removed["scratch"] != 1 {
		t.Fatalf("exit %d, summary %+v", code, sum)
	}
	for name, f := range files {
		framework.CheckFiles(t, name, f, name != "gone pod, unknown sandbox")
	}
}

// TestDaemonCRILiveness runs the daemon with --liveness=cri and no API
// server at all: it prunes what the fake runtime does not know, skips and
// counts cycles while the runtime hangs or is down, and resumes after, and
// keeps its boot record in --state-dir.
func TestDaemonCRILiveness(t *testing.T) {
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	state := filepath.Join(t.TempDir(), "state")
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	writeBootID(t, bootFile, "1f0e7c2a-aaaa-4d5e-9f00-00000000000a")
	old := time.Now().Add(-time.Hour)
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: "5a0c2b1e-0000-4000-8000-000000000002"}
	live, gone := multuscache.NewSandboxID(), multuscache.NewSandboxID()
	liveFiles := sandboxFiles(t, dir, live, pod, old)
	goneFiles := sandboxFiles(t, dir, gone, pod, old)
	rt.SetSandboxes(live)

	d := sweepdproc.Start(t, "/nonexistent/kubeconfig", "--liveness=cri", "--expect-runtime=fakecri", "--cri-endpoint="+rt.Endpoint, "--cri-timeout=1s",
		"--multus-dir="+dir, "--schedule=@every 1s", "--state-dir="+state, "--boot-id-file="+bootFile)
	framework.Eventually(t, 15*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })

	t.Run("prunes the sandbox the runtime does not know", func(t *testing.T) {
		framework.Eventually(t, 15*time.Second, "unknown sandbox pruned", func() bool {
			for _, p := range goneFiles {
				if framework.Exists(p) {
					return false
				}
			}
			return true
		})
		framework.CheckFiles(t, "known sandbox", liveFiles, true)
		framework.Eventually(t, 10*time.Second, "boot record", func() bool { return framework.Exists(filepath.Join(state, "boot-record.json")) })
	})

	for _, outage := range []struct {
		name        string
		start, stop func()
	}{
		{"hangs", func() { rt.SetHang(true) }, func() { rt.SetHang(false) }},
		{"is down", rt.Stop, func() { rt.Resume(t) }},
	} {
		t.Run("no deletions while the runtime "+outage.name, func(t *testing.T) {
			outage.start()
			orphan := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, old)
			skipped := d.Metric(t, `sweep_prune_skipped_runs_total{reason="cri-unavailable"}`)
			framework.Eventually(t, 20*time.Second, "two skipped runs", func() bool {
				return d.Metric(t, `sweep_prune_skipped_runs_total{reason="cri-unavailable"}`) >= skipped+2
			})
			framework.CheckFiles(t, "runtime "+outage.name, orphan, true)
			outage.stop()
			framework.Eventually(t, 20*time.Second, "pruning resumed", func() bool {
				for _, p := range orphan {
					if framework.Exists(p) {
						return false
					}
				}
				return true
			})
			framework.CheckFiles(t, "known sandbox", liveFiles, true)
		})
	}

	t.Run("metrics pass promtool, no pod series", func(t *testing.T) {
		_, body := d.Get("/metrics")
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
		if strings.Contains(body, "sweep_pods ") || strings.Contains(body, "sweep_pod_view_fresh") {
			t.Error("pod series without a pod view")
		}
		d.WaitMetric(t, `sweep_prune_removals_total{cache="multus",reason="sandbox-gone"}`, 6)
		d.WaitMetric(t, `sweep_prune_removals_total{cache="multus",reason="orphan-scratch"}`, 3)
		for series, want := range map[string]float64{
			`sweep_runtime_sandboxes`:                                      1,
			`sweep_prune_kept_files{cache="multus",reason="sandbox-live"}`: 2,
			`sweep_boot_record_errors_total`:                               0,
			`sweep_prune_skipped_runs_total{reason="still-running"}`:       -2, // any value
		} {
			got := d.Metric(t, series)
			if got < 0 || (want >= 0 && got != want) {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}

// TestDaemonRebootAwareBoth runs the daemon with --liveness=both across a
// faked reboot: a restart with another boot ID. The live pod's sandbox from
// before the reboot stays while the runtime still lists it (NOTREADY: its
// DEL is the runtime's), goes once the runtime forgets it, and the pod's new
// sandbox stays. A cycle still makes no API request.
func TestDaemonRebootAwareBoth(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	state := filepath.Join(t.TempDir(), "state")
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	old := time.Now().Add(-time.Hour)
	pod := multuscache.Pod{Namespace: "default", Name: "web", UID: kubeobj.CreatePod(t, cs, "default", "web", "node-a")}
	args := []string{"--node-name=node-a", "--liveness=both", "--cri-endpoint=" + rt.Endpoint, "--cri-timeout=1s",
		"--multus-dir=" + dir, "--schedule=@every 1s", "--state-dir=" + state, "--boot-id-file=" + bootFile}

	// Boot A: one sandbox, recorded by the first daemon.
	bootNode(t, cs, "node-a", bootFile, "2b7c9d10-aaaa-4e6f-8a00-00000000000a")
	before := multuscache.NewSandboxID()
	beforeFiles := sandboxFiles(t, dir, before, pod, old)
	rt.SetSandboxes(before)
	d := sweepdproc.Start(t, cp.Kubeconfig, args...)
	framework.Eventually(t, 30*time.Second, "a run", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= 1 })
	framework.Eventually(t, 10*time.Second, "boot record", func() bool { return framework.Exists(filepath.Join(state, "boot-record.json")) })
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.Done <- <-d.Done

	// Boot B: the kubelet made a new sandbox; the runtime lists the old one
	// as NOTREADY.
	bootNode(t, cs, "node-a", bootFile, "2b7c9d10-bbbb-4e6f-8a00-00000000000b")
	after := multuscache.NewSandboxID()
	afterFiles := sandboxFiles(t, dir, after, pod, old)
	rt.SetSandboxes(after)
	rt.Add(before, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	d = sweepdproc.Start(t, cp.Kubeconfig, args...)
	framework.Eventually(t, 30*time.Second, "two runs", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= 2 })
	framework.CheckFiles(t, "earlier boot, runtime still knows it", beforeFiles, true)
	framework.CheckFiles(t, "this boot", afterFiles, true)

	// The runtime forgets the old sandbox: it goes, though its pod is live.
	rt.SetSandboxes(after)
	framework.Eventually(t, 20*time.Second, "earlier boot's files pruned", func() bool {
		for _, p := range beforeFiles {
			if framework.Exists(p) {
				return false
			}
		}
		return true
	})
	framework.CheckFiles(t, "this boot", afterFiles, true)
	d.WaitMetric(t, `sweep_prune_removals_total{cache="multus",reason="earlier-boot"}`, 3) // 2 results, 1 scratch

	t.Run("zero API requests per prune cycle", func(t *testing.T) {
		requests := sweepdRequests(t, cp.AuditLog())
		runs, lists := d.Metric(t, "sweep_prune_runs_total"), rt.Lists()
		framework.Eventually(t, 20*time.Second, "three more runs", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= runs+3 })
		if after := sweepdRequests(t, cp.AuditLog()); after != requests {
			t.Fatalf("%d API requests during the runs, want 0", after-requests)
		}
		if rt.Lists()-lists < 3 {
			t.Fatalf("%d CRI lists for three runs", rt.Lists()-lists)
		}
	})
}

// kubeletsRuntime starts a fake runtime that a fake kubelet on this machine
// uses, as a node's runtime is: on a bare node sweepd trusts a runtime only
// once a running kubelet names its socket.
func kubeletsRuntime(t testing.TB) *fakecri.Server {
	t.Helper()
	rt := fakecri.Start(t)
	witness.StartKubelet(t, "--container-runtime-endpoint="+rt.Endpoint)
	return rt
}
