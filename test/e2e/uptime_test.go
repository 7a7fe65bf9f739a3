package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestClockGuardOnFreshBoot (issue 41): no file written since boot can be
// older than the time since boot, so the same files of a gone sandbox, two
// hours old by their mtime, are kept as clock-unsettled while the machine
// has been up for less than the minimum age (a minute after boot: every CI
// runner's uptime), and removed once it has been up for longer. The uptime
// is sweepd's own (a time namespace), whatever the test machine's.
func TestClockGuardOnFreshBoot(t *testing.T) {
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.NewUID()}
	files := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, time.Now().Add(-2*time.Hour))
	rt.SetSandboxes(multuscache.NewSandboxID()) // another pod's: an empty list proves nothing
	prune := func(up time.Duration) (pruneSummary, string, int) {
		t.Helper()
		cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), "prune", "--output=json", "--liveness=cri",
			"--cri-endpoint="+rt.Endpoint, "--cri-timeout=2s", "--multus-dir="+dir, "--min-age=1h")
		cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME=", "POD_UID=")
		out, stderr, code := runCmdUp(t, cmd, up)
		var sum pruneSummary
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("summary: %v\n%s", err, out)
			}
		}
		return sum, stderr, code
	}
	for _, up := range []time.Duration{time.Minute, 59 * time.Minute} {
		sum, stderr, code := prune(up)
		if code != 0 || sum.Kept["clock-unsettled"] != 2 || len(sum.RemovedBy) != 0 {
			t.Fatalf("up %s: exit %d, summary %+v; want both results files kept as clock-unsettled\n%s", up, code, sum, stderr)
		}
		framework.CheckFiles(t, "files on a machine up for less than the minimum age", files, true)
	}
	sum, stderr, code := prune(61 * time.Minute)
	if code != 0 || sum.RemovedBy["sandbox-gone"] != 2 {
		t.Fatalf("up 61m: exit %d, summary %+v; want both results files removed\n%s", code, sum, stderr)
	}
	framework.CheckFiles(t, "files on a machine up for longer than the minimum age", files, false)
}
