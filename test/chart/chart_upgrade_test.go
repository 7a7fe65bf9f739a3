package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// previousChartFallback is the chart an upgrade starts from while no
// release is tagged: main at the last CI run that passed before the
// CHANGELOG began. Once a release v* is tagged, the newest one is used.
const previousChartFallback = "069947f"

// TestChartUpgradeReuseValues (issue 44): an operator upgrades from the
// previous chart with `helm upgrade --reuse-values`, as docs/install.md
// says, against a real API server: the strict schema must accept every
// value the previous chart's user could have set, and the values set stay
// set. A renamed or removed value fails here, before it fails a user's
// upgrade; the release's Upgrading notes then say what to do.
func TestChartUpgradeReuseValues(t *testing.T) {
	ref := previousChartFallback
	if out, err := exec.Command("git", "describe", "--tags", "--abbrev=0", "--match", "v*").Output(); err == nil {
		ref = strings.TrimSpace(string(out))
	}
	prev := t.TempDir()
	archive := exec.Command("sh", "-c", "git archive "+ref+" charts/sweep | tar -x -C "+prev)
	archive.Dir = "../.."
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the chart of %s (git archive; the clone needs its history): %v\n%s", ref, err, out)
	}
	t.Logf("upgrading from the chart of %s", ref)

	cp := controlplane.Start(t)
	helm := func(args ...string) string {
		t.Helper()
		return framework.RunTool(t, nil, controlplane.Tool(t, "helm"), append(args, "--kubeconfig", cp.Kubeconfig,
			"--namespace", chartrender.Namespace)...)
	}
	// Values an operator sets: the ones the docs' first rollout and the
	// chart's operator pages name.
	set := []string{"--set", "daemon.dryRun=true", "--set", "daemon.schedule=@every 30m", "--set", "metrics.serviceMonitor.enabled=false",
		// Removed since: ignored, and said so, for kubeletRuntimeRequestTimeout.
		"--set", "daemon.deletedPodMinAge=7m"}
	helm(append([]string{"install", chartrender.Release, filepath.Join(prev, "charts", "sweep"), "--create-namespace"}, set...)...)
	out := helm("upgrade", chartrender.Release, chartrender.Dir, "--reuse-values")
	if !strings.Contains(out, "daemon.deletedPodMinAge (7m) is no longer used") {
		t.Errorf("the upgrade's notes do not say that the removed value set is ignored:\n%s", out)
	}

	ds, err := cp.Clientset(t).AppsV1().DaemonSets(chartrender.Namespace).Get(t.Context(), chartrender.Release+"-sweep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " ")
	// A value the previous chart did not have takes its default: the
	// reused values are the previous chart's.
	for _, want := range []string{"--dry-run=true", "--schedule=@every 30m", "--kubelet-runtime-request-timeout=2m"} {
		if !strings.Contains(args, want) {
			t.Errorf("after the upgrade the daemon's args are %s, want %s", args, want)
		}
	}
	if strings.Contains(args, "--deleted-pod-min-age") {
		t.Errorf("after the upgrade the daemon's args are %s: a removed flag", args)
	}
	if ds.Labels["helm.sh/chart"] == "" || !strings.Contains(helm("history", chartrender.Release), "deployed") {
		t.Errorf("the upgraded release is not deployed:\n%s", helm("history", chartrender.Release))
	}
}
