package ranges

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/sweep-k8s/sweep/cachefile"
)

// fakeSandboxes is the runtime's list: the sandboxes it names.
type fakeSandboxes map[cachefile.SandboxID]struct{}

func (f fakeSandboxes) Has(id cachefile.SandboxID) bool { _, ok := f[id]; return ok }

func writeFile(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// TestRangeGauges reads a fabricated configuration and data directory and
// checks the series, with the runtime's list and without, that promtool
// finds them clean, and that networks past the cap have none.
func TestRangeGauges(t *testing.T) {
	root := t.TempDir()
	conf, data := filepath.Join(root, "net.d"), filepath.Join(root, "networks")
	// pods: 10.1.0.0/28 allocates .2 to .14, 13 addresses.
	writeFile(t, filepath.Join(conf, "10-pods.conflist"), `{"name":"pods","plugins":[{"type":"bridge","ipam":{"type":"host-local",
		"dataDir":"`+data+`","ranges":[[{"subnet":"10.1.0.0/28"}]]}}]}`, time.Now())
	live, dead := strings.Repeat("a", 64), strings.Repeat("b", 64)
	liveID, _ := cachefile.ParseSandboxID(live)
	old := time.Now().Add(-time.Hour)
	for i := 2; i <= 12; i++ { // 11 reserved: 2 free
		id := dead
		if i == 2 {
			id = live
		}
		writeFile(t, filepath.Join(data, "pods", fmt.Sprintf("10.1.0.%d", i)), id+"\r\neth0", old)
	}
	var sb Sandboxes = fakeSandboxes{liveID: {}}
	r := NewReader(conf, 5*time.Minute, func(context.Context) Sandboxes { return sb }, slog.New(slog.DiscardHandler))
	m := prometheus.NewRegistry()
	m.MustRegister(r.Collector())

	if got := gatherSeries(t, m); len(filterSeries(got, "sweep_host_local_")) != 0 {
		t.Errorf("series before the first read: %v", filterSeries(got, "sweep_host_local_"))
	}
	r.Refresh(context.Background())
	want := map[string]float64{
		`sweep_host_local_range_addresses{network="pods",range="10.1.0.0/28"}`:           13,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="in_use"}`:  1,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="dead"}`:    10,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="young"}`:   0,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="unknown"}`: 0,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="free"}`:    2,
		`sweep_host_local_networks_omitted`:                                              0,
		`sweep_host_local_range_read_errors`:                                             0,
	}
	checkSeries(t, m, want)
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition(t, m))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// Without a list to trust, who holds them is not guessed.
	sb = nil
	r.Refresh(context.Background())
	checkSeries(t, m, map[string]float64{
		`sweep_host_local_range_addresses{network="pods",range="10.1.0.0/28"}`:            13,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="reserved"}`: 11,
		`sweep_host_local_addresses{network="pods",range="10.1.0.0/28",state="free"}`:     2,
		`sweep_host_local_networks_omitted`:                                               0,
		`sweep_host_local_range_read_errors`:                                              0,
	})

	// Past the cap, and a broken file: counted, and the rest have no
	// series; a network gone from the configuration loses its series.
	if err := os.Remove(filepath.Join(conf, "10-pods.conflist")); err != nil {
		t.Fatal(err)
	}
	for i := range maxRangeNetworks + 2 {
		writeFile(t, filepath.Join(conf, fmt.Sprintf("%02d.conf", i)),
			fmt.Sprintf(`{"name":"n%02d","type":"bridge","ipam":{"type":"host-local","dataDir":"%s","subnet":"10.2.%d.0/24"}}`, i, data, i), time.Now())
	}
	writeFile(t, filepath.Join(conf, "99-broken.conf"), "{", time.Now())
	r.Refresh(context.Background())
	got := gatherSeries(t, m)
	if n := len(filterSeries(got, "sweep_host_local_range_addresses{")); n != maxRangeNetworks {
		t.Errorf("%d ranges have series, want %d", n, maxRangeNetworks)
	}
	if got["sweep_host_local_networks_omitted"] != 2 || got["sweep_host_local_range_read_errors"] != 1 {
		t.Errorf("omitted %v, read errors %v; want 2 and 1", got["sweep_host_local_networks_omitted"], got["sweep_host_local_range_read_errors"])
	}
	if _, ok := got[`sweep_host_local_range_addresses{network="pods",range="10.1.0.0/28"}`]; ok {
		t.Error("a network gone from the configuration keeps its series")
	}
}

// filterSeries returns the series whose name starts with prefix.
func filterSeries(series map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range series {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// checkSeries checks that the sweep_host_local_ range series are want.
func checkSeries(t *testing.T, m *prometheus.Registry, want map[string]float64) {
	t.Helper()
	got := filterSeries(gatherSeries(t, m), "sweep_host_local_")
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %t), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s", k)
		}
	}
}

// exposition is the registry in the text format, as /metrics serves it.
func exposition(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// gatherSeries returns the gauges of the registry by series: the name,
// with its labels in the exposition's order when it has any.
func gatherSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			if metric.Gauge != nil {
				series[name] = metric.GetGauge().GetValue()
			}
		}
	}
	return series
}
