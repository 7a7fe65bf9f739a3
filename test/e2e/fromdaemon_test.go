package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestPruneFromDaemon: `sweepd prune --from-daemon`, as an operator runs it
// in the daemon's container, decides with the running daemon's settings
// (its cache directory, its --min-age), not with the command's defaults,
// removes nothing, and refuses a flag that would decide otherwise; a
// dry-run daemon logs its would-be removals at INFO, as a real one logs
// its removals.
func TestPruneFromDaemon(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	dir := filepath.Join(t.TempDir(), "multus")
	write := func(name, uid string, age time.Duration) []string {
		paths, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: name, UID: uid},
			multuscache.DefaultAttachments(), time.Now().Add(-age))
		if err != nil {
			t.Fatal(err)
		}
		return paths
	}
	live := write("live", kubeobj.CreatePod(t, cs, "default", "live", "node-a"), 2*time.Hour)
	old := write("old", "6f1c2a3e-0000-4000-8000-00000000dead", 2*time.Hour)
	// Stale, but younger than the daemon's --min-age of 1h, older than the
	// command's default of 15m: only the daemon's settings keep it.
	young := write("young", "6f1c2a3e-0000-4000-8000-0000000000aa", 30*time.Minute)

	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=1h", "--dry-run", "--schedule=@every 1h")
	framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })

	t.Run("a dry-run daemon logs its would-be removals at INFO", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "an INFO would-remove line", func() bool {
			data, _ := os.ReadFile(d.Log)
			return bytes.Contains(data, []byte(`level=INFO msg="would remove"`))
		})
	})

	sweepd := testbin.Build(t, "./cmd/sweepd")
	pid := strconv.Itoa(d.Cmd.Process.Pid)
	t.Run("decides with the daemon's settings", func(t *testing.T) {
		// The command's own environment has no kubeconfig and no node
		// name: both come from the daemon's command line.
		cmd := exec.Command(sweepd, "prune", "--from-daemon", "--daemon-pid="+pid, "-o", "json")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, stderr, code := runCmd(t, cmd)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		var res struct {
			Files []struct {
				File, Action, Reason string
			} `json:"files"`
			DryRun bool   `json:"dryRun"`
			Dir    string `json:"dir"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		actions := map[string]string{} // by path, as the listing names files relative to the directory
		for _, f := range res.Files {
			actions[filepath.Join(dir, f.File)] = f.Action + " " + f.Reason
		}
		for _, p := range old {
			if got := actions[p]; !strings.HasPrefix(got, "would-remove ") {
				t.Errorf("%s: %q, want removed in the dry run", p, got)
			}
		}
		for _, p := range young {
			if got := actions[p]; got != "kept too-young" && got != "kept sandbox-referenced" {
				t.Errorf("%s: %q, want kept as too-young by the daemon's --min-age", p, got)
			}
		}
		for _, p := range live {
			if got := actions[p]; !strings.HasPrefix(got, "kept ") {
				t.Errorf("%s: %q, a live pod's file", p, got)
			}
		}
		if !res.DryRun || res.Dir != dir {
			t.Errorf("a run of %s, dry %v: want a dry run of %s", res.Dir, res.DryRun, dir)
		}
		for _, p := range slicesConcat(old, young, live) {
			if !framework.Exists(p) {
				t.Errorf("%s removed", p)
			}
		}
	})

	t.Run("refuses a setting of its own", func(t *testing.T) {
		for _, args := range [][]string{
			{"--multus-dir=/tmp"},
			{"--min-age=1m"},
			{"--dry-run=false"},
		} {
			cmd := exec.Command(sweepd, append([]string{"prune", "--from-daemon", "--daemon-pid=" + pid}, args...)...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("%v: %v, want a usage error (exit 2)\n%s", args, err, out)
			}
		}
	})
}

func slicesConcat(ss ...[]string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}
