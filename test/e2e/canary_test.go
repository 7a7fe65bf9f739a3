package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestDryRunAnnotation (issue 44): the Node's sweep.k8s.io/dry-run
// decides the daemon's dry run over --dry-run, for a staged rollout: the
// chart dry-runs every node and a canary's annotation "false" turns removal
// on there; "true" holds one node back from a fleet that removes; a value
// that is neither is a dry run, said at WARN. Without the annotation
// --dry-run decides. Each case is one daemon's first run on node-a.
func TestDryRunAnnotation(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureNode(t, cs, "node-a")
	annotate := func(t *testing.T, value *string) {
		t.Helper()
		v := "null"
		if value != nil {
			v = `"` + *value + `"`
		}
		patch := []byte(`{"metadata":{"annotations":{"sweep.k8s.io/dry-run":` + v + `}}}`)
		if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name       string
		dryRunFlag bool
		annotation *string
		removed    bool
		warn       bool
		// overrides: the annotation removes under --dry-run, which the
		// log says at WARN and the Node's Warning Event too.
		overrides bool
	}{
		{name: "canary: --dry-run, annotation false", dryRunFlag: true, annotation: str("false"), removed: true, overrides: true},
		{name: "held back: annotation true", annotation: str("true")},
		{name: "a typo is a dry run", annotation: str("flase"), warn: true},
		{name: "--dry-run without annotation", dryRunFlag: true},
		{name: "neither", removed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			annotate(t, tc.annotation)
			dir := filepath.Join(t.TempDir(), "multus")
			stale, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(),
				multuscache.Pod{Namespace: "default", Name: "gone", UID: "6f1c2a3e-0000-4000-8000-00000000dead"},
				multuscache.DefaultAttachments(), time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--node-name=node-a", "--multus-dir=" + dir, "--schedule=@every 1h"}
			if tc.dryRunFlag {
				args = append(args, "--dry-run")
			}
			d := sweepdproc.Start(t, cp.Kubeconfig, args...)
			framework.Eventually(t, 30*time.Second, "the first run complete", func() bool {
				return d.Metric(t, "sweep_prune_last_success_timestamp_seconds") > 0
			})
			for _, p := range stale {
				if framework.Exists(p) == tc.removed {
					t.Errorf("%s: exists %t, want removed %t", p, framework.Exists(p), tc.removed)
				}
			}
			// Dry run or not, the run found them stale.
			if got := d.Metric(t, `sweep_prune_stale_files{cache="multus",reason="pod-gone"}`); got != 2 {
				t.Errorf(`sweep_prune_stale_files{reason="pod-gone"} = %v, want 2`, got)
			}
			log, err := os.ReadFile(d.Log)
			if err != nil {
				t.Fatal(err)
			}
			if warned := strings.Contains(string(log), "level=WARN") && strings.Contains(string(log), "neither true nor false"); warned != tc.warn {
				t.Errorf("warned of the annotation's value: %t, want %t\n%s", warned, tc.warn, log)
			}
			// The mode in force, where operators look (issue 52): the
			// metric and the dashboard say what the node does, not what
			// the chart asked.
			info := func(dry bool) string {
				return fmt.Sprintf(`sweep_config_info{cni_del="false",dry_run="%t",liveness="api",reboot_aware="false"}`, dry)
			}
			if d.Metric(t, info(!tc.removed)) != 1 || d.Metric(t, info(tc.removed)) != -1 {
				t.Errorf("%s = %v, %s = %v; want the mode in force alone, dry_run=%t", info(!tc.removed), d.Metric(t, info(!tc.removed)),
					info(tc.removed), d.Metric(t, info(tc.removed)), !tc.removed)
			}
			overridden := regexp.MustCompile(`level=WARN msg="the Node's dry-run annotation overrides --dry-run: this node removes files"`).Match(log)
			if overridden != tc.overrides {
				t.Errorf("said at WARN that the annotation overrides --dry-run: %t, want %t\n%s", overridden, tc.overrides, log)
			}
			if tc.overrides {
				framework.Eventually(t, 30*time.Second, "a Warning Event SweepDryRunOverridden on node-a", func() bool {
					list, err := cs.EventsV1().Events("default").List(t.Context(), metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range list.Items {
						if e.Regarding.Name == "node-a" && e.Type == "Warning" && e.Reason == "SweepDryRunOverridden" &&
							strings.Contains(e.Note, "annotation sweep.k8s.io/dry-run=false overrides") {
							return true
						}
					}
					return false
				})
			}
		})
	}
	annotate(t, nil)
}
