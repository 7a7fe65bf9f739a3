package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// dashboardFile is the dashboard the chart ships.
const dashboardFile = chartrender.Dir + "/dashboards/sweep.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *grafanaRef     `json:"datasource"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *grafanaRef              `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		Datasource *grafanaRef `json:"datasource"`
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
	} `json:"targets"`
}

type grafanaRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// parseDashboard decodes data and checks what Grafana and the sidecar need
// of it, and what keeps its panels consistent: every panel queries the
// ${datasource} variable's Prometheus and selects by the node variable.
func parseDashboard(t *testing.T, data []byte) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.UID == "" || d.SchemaVersion < 36 { // 36: datasources referenced by {type, uid}
		t.Errorf("uid %q, schemaVersion %d: want a uid and schemaVersion >= 36", d.UID, d.SchemaVersion)
	}
	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	if i, ok := vars["datasource"]; !ok || d.Templating.List[i].Type != "datasource" || string(d.Templating.List[i].Query) != `"prometheus"` {
		t.Error("no datasource variable of type prometheus")
	}
	if i, ok := vars["node"]; !ok || d.Templating.List[i].Definition != "label_values(sweep_build_info, node)" ||
		d.Templating.List[i].AllValue != ".*" || !isPromVar(d.Templating.List[i].Datasource) {
		t.Error(`no node variable from label_values(sweep_build_info, node) with allValue ".*" on ${datasource}`)
	}
	// Selectors of the sweep_ metrics; every one must filter by node.
	selector := regexp.MustCompile(`\bsweep_[a-z_]+(\{[^}]*\})?`)
	ids := map[int]bool{}
	var cells [][2]int // occupied grid cells, {x, y}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("%s: id missing or not unique", where)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			t.Errorf("%s: a row; the tests expect every panel to query", where)
		}
		if !isPromVar(p.Datasource) {
			t.Errorf("%s: datasource %+v, want the ${datasource} variable", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if !isPromVar(tg.Datasource) || tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: target %s: datasource %+v, expr %q; want ${datasource}, an expression and a unique refId", where, tg.RefID, tg.Datasource, tg.Expr)
			}
			refs[tg.RefID] = true
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.Contains(m[1], `node=~"$node"`) {
					t.Errorf("%s: target %s: %s does not select node=~\"$node\"", where, tg.RefID, m[0])
				}
			}
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24 columns", where, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if slices.Contains(cells, [2]int{x, y}) {
					t.Errorf("%s: overlaps another panel at %d,%d", where, x, y)
				}
				cells = append(cells, [2]int{x, y})
			}
		}
	}
	if len(d.Panels) == 0 {
		t.Error("no panels")
	}
	return d
}

func isPromVar(r *grafanaRef) bool {
	return r != nil && r.Type == "prometheus" && r.UID == "${datasource}"
}

// TestChartGrafanaDashboard renders the dashboard's ConfigMap: absent by
// default, else in the namespace with the label the Grafana sidecar looks
// for, holding the dashboard file as it is.
func TestChartGrafanaDashboard(t *testing.T) {
	file, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	const on = "metrics.grafanaDashboard.enabled=true"
	for _, c := range []struct {
		name        string
		flags       []string
		absent      bool
		namespace   string
		labels      map[string]string // a subset of the ConfigMap's
		annotations map[string]string
	}{
		{name: "off by default", absent: true},
		{name: "on", flags: []string{"--set", on}, namespace: chartrender.Namespace,
			labels: map[string]string{"grafana_dashboard": "1", "app.kubernetes.io/name": "sweep"}},
		{name: "Grafana's namespace, folder annotation, extra labels", flags: []string{"--set", on,
			"--set", "metrics.grafanaDashboard.namespace=monitoring",
			"--set", "metrics.grafanaDashboard.labels.team=network",
			"--set", "metrics.grafanaDashboard.annotations.k8s-sidecar-target-directory=Networking"},
			namespace:   "monitoring",
			labels:      map[string]string{"grafana_dashboard": "1", "team": "network"},
			annotations: map[string]string{"k8s-sidecar-target-directory": "Networking"}},
		// The grafana chart's own default is label grafana_dashboard with
		// any value; others pick their own.
		{name: "the sidecar's label and value", flags: []string{"--set", on,
			"--set", "metrics.grafanaDashboard.sidecarLabel=dashboards.example.com/load",
			"--set", "metrics.grafanaDashboard.sidecarLabelValue=yes"},
			namespace: chartrender.Namespace, labels: map[string]string{"dashboards.example.com/load": "yes"}},
		// A number from --set is the label's string.
		{name: "numeric label value", flags: []string{"--set", on, "--set", "metrics.grafanaDashboard.sidecarLabelValue=2"},
			namespace: chartrender.Namespace, labels: map[string]string{"grafana_dashboard": "2"}},
		// Extra labels cannot unset what makes the sidecar load it, nor the
		// chart's own labels.
		{name: "labels do not override the sidecar's or the chart's", flags: []string{"--set", on,
			"--set-string", "metrics.grafanaDashboard.labels.grafana_dashboard=0",
			"--set", "metrics.grafanaDashboard.labels.app\\.kubernetes\\.io/name=other"},
			namespace: chartrender.Namespace, labels: map[string]string{"grafana_dashboard": "1", "app.kubernetes.io/name": "sweep"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := chartrender.Decode(t, chartrender.Render(t, c.flags...))
			var cms []string
			for _, o := range objs {
				if o.GetKind() == "ConfigMap" {
					cms = append(cms, o.GetName())
				}
			}
			if c.absent {
				if len(cms) != 0 {
					t.Errorf("ConfigMaps %v rendered, want none", cms)
				}
				return
			}
			cm := chartrender.Find(t, objs, "ConfigMap", "rel-sweep-dashboard")
			if cm.GetNamespace() != c.namespace {
				t.Errorf("namespace %q, want %q", cm.GetNamespace(), c.namespace)
			}
			labels := cm.GetLabels()
			if got := maps.Collect(func(yield func(string, string) bool) {
				for k := range c.labels {
					if !yield(k, labels[k]) {
						return
					}
				}
			}); !maps.Equal(got, c.labels) {
				t.Errorf("labels %v, want %v among them", labels, c.labels)
			}
			if c.annotations != nil && !maps.Equal(cm.GetAnnotations(), c.annotations) {
				t.Errorf("annotations %v, want %v", cm.GetAnnotations(), c.annotations)
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			if !slices.Equal(slices.Collect(maps.Keys(data)), []string{"sweep.json"}) {
				t.Fatalf("data keys %v, want sweep.json", slices.Collect(maps.Keys(data)))
			}
			// As the file is: the sidecar writes it out for Grafana to load.
			if data["sweep.json"] != strings.TrimRight(string(file), "\n") {
				t.Error("sweep.json differs from " + dashboardFile)
			}
			parseDashboard(t, []byte(data["sweep.json"]))
		})
	}

	t.Run("schema rejects", func(t *testing.T) {
		for _, set := range []string{
			"metrics.grafanaDashboard.sidecarLabel=",        // the sidecar would load nothing
			"metrics.grafanaDashboard.namespace=Monitoring", // not a namespace name
			"metrics.grafanaDashboard.folder=Networking",    // a typo of annotations
		} {
			out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
				"--set", on, "--set", set).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "schema") {
				t.Errorf("--set %s: %v, want a schema error:\n%s", set, err, out)
			}
		}
	})
}

// promQuery is one query of a panel, as Prometheus gets it.
type promQuery struct {
	panel, ref, expr string
}

// dashboardQueries returns every panel target's expression with the
// dashboard's variables replaced as Grafana would: node by the given regular
// expression, $__rate_interval by a window that holds several scrapes of
// the test's Prometheus. It fails on a variable it does not know.
func dashboardQueries(t *testing.T, d dashboard, node string) []promQuery {
	t.Helper()
	r := strings.NewReplacer(
		"${node}", node, "$node", node,
		// Grafana makes it at least four scrape intervals; the test
		// scrapes every second.
		"${__rate_interval}", "15s", "$__rate_interval", "15s",
	)
	var qs []promQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := r.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q target %s: a variable the test does not replace: %s", p.Title, tg.RefID, expr)
				continue
			}
			qs = append(qs, promQuery{p.Title, tg.RefID, expr})
		}
	}
	return qs
}

// TestDashboardQueries runs every query of the chart's dashboard against a
// real Prometheus scraping a real daemon, after prune runs: each must
// succeed and return samples, all of them numbers (a NaN draws nothing), or
// be in the table of series this setup cannot have, which must then be
// empty. The stat panels' values are checked where this setup fixes them.
func TestDashboardQueries(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	d := parseDashboard(t, data)
	// Panel title and refId to why Prometheus has no series for it here.
	empty := map[string]string{
		"Pods and sandboxes/B": "sweep_runtime_sandboxes needs liveness cri or both; the daemon runs with api",
	}
	// Panel title and refId to the value it must have: one daemon, not in
	// a dry run, succeeding, with a fresh view.
	want := map[string]float64{
		"Daemons reporting/A":  1,
		"In dry run/A":         0,
		"Last run failed/A":    0,
		"Pod view not fresh/A": 0,
	}

	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	const node = "node-a"
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	// A live pod's files, kept, and a deleted pod's, removed: the kept and
	// stale panels then have reasons to show.
	for name, uid := range map[string]string{
		"live":  kubeobj.CreatePod(t, cs, "default", "live", node),
		"stale": "6f1c2a3e-0000-4000-8000-00000000dead",
	} {
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: name, UID: uid}, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
	}
	// The runtime's own cache too, so that the panels by cache have both.
	runtimeDir := filepath.Join(t.TempDir(), "results")
	if _, err := multuscache.RuntimeSandbox(runtimeDir, multuscache.NewSandboxID(),
		multuscache.Pod{Namespace: "default", Name: "stale", UID: "6f1c2a3e-0000-4000-8000-00000000dead"}, old); err != nil {
		t.Fatal(err)
	}
	// A run every second, so that every rate in the dashboard has runs in
	// its window.
	sweepd := sweepdproc.Start(t, cp.Kubeconfig, "--node-name="+node, "--multus-dir="+dir, "--runtime-cache-dir="+runtimeDir,
		"--schedule=@every 1s", "--prune-on-start")
	framework.Eventually(t, 30*time.Second, "a prune run", func() bool { return sweepd.Metric(t, "sweep_prune_last_run_timestamp_seconds") > 0 })
	// The node label, as the chart's ServiceMonitor sets it from the pod's
	// node.
	prom := framework.StartPrometheus(t, map[string]string{"node": node}, strings.TrimPrefix(sweepd.URL, "http://"))

	// One deadline for every query: they wait for the same scrapes.
	deadline := time.Now().Add(60 * time.Second)
	await := func(what string, ok func() error) {
		t.Helper()
		for {
			err := ok()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %v", what, err)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	await("the daemon as an up target", func() error {
		var targets struct {
			ActiveTargets []struct{ Health, LastError string } `json:"activeTargets"`
		}
		if err := prom.API("/api/v1/targets", nil, &targets); err != nil {
			return err
		}
		if len(targets.ActiveTargets) != 1 || targets.ActiveTargets[0].Health != "up" {
			return fmt.Errorf("targets %+v, want one up", targets.ActiveTargets)
		}
		return nil
	})
	// The node variable's values: label_values(sweep_build_info, node).
	await("the node variable", func() error {
		var values []string
		if err := prom.API("/api/v1/label/node/values", url.Values{"match[]": {"sweep_build_info"}}, &values); err != nil {
			return err
		}
		if !slices.Equal(values, []string{node}) {
			return fmt.Errorf("values %v, want [%s]", values, node)
		}
		return nil
	})
	if t.Failed() {
		t.FailNow()
	}

	// All nodes (the variable's allValue), and the one node, as picking it
	// in the variable does.
	used := map[string]bool{}
	for _, sel := range []string{".*", node} {
		for _, q := range dashboardQueries(t, d, sel) {
			key := q.panel + "/" + q.ref
			used[key] = true
			what := fmt.Sprintf("node %q: panel %q target %s: %s", sel, q.panel, q.ref, q.expr)
			if reason, ok := empty[key]; ok {
				// The other series of the same scrapes are there by now
				// (the node variable); this one must not be.
				got, err := prom.Query(q.expr)
				if err != nil || len(got) != 0 {
					t.Errorf("%s: %v, %v; want success and no series (%s)", what, got, err, reason)
				}
				continue
			}
			await(what, func() error {
				got, err := prom.Query(q.expr)
				switch {
				case err != nil:
					return err
				case len(got) == 0:
					return fmt.Errorf("no series")
				}
				for series, v := range got {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						return fmt.Errorf("%s = %v", series, v)
					}
					if w, ok := want[key]; ok && v != w {
						return fmt.Errorf("%s = %v, want %v", series, v, w)
					}
				}
				return nil
			})
		}
	}
	for key := range maps.Keys(empty) {
		if !used[key] {
			t.Errorf("%s is in the table of empty queries but not in the dashboard", key)
		}
	}
	for key := range maps.Keys(want) {
		if !used[key] {
			t.Errorf("%s is in the table of values but not in the dashboard", key)
		}
	}
}
