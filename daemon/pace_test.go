package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sweep-k8s/sweep/cnidel"
)

// TestReleaseUntil: a run stops starting DELs before the next scheduled
// run, so that a drain over several runs never has two at once.
func TestReleaseUntil(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 20, 0, 0, time.Local)
	for _, tc := range []struct {
		spec string
		want time.Time
	}{
		{"@every 1h", now.Add(59 * time.Minute)},
		{"0 * * * *", time.Date(2026, 12, 1, 10, 59, 0, 0, time.Local)},
		{"@every 5m", now.Add(4*time.Minute + 30*time.Second)},
		{"@every 10s", now.Add(9 * time.Second)},
	} {
		sched, err := cron.ParseStandard(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := releaseUntil(sched, now); !got.Equal(tc.want) {
			t.Errorf("%s: DELs until %s, want %s", tc.spec, got, tc.want)
		}
		if next := sched.Next(now); !releaseUntil(sched, now).Before(next) {
			t.Errorf("%s: DELs until the next run at %s", tc.spec, next)
		}
	}
}

// TestObserveDELBounded: the plugin types come from cache files; past
// maxDELLabels pairs, and for names no plugin has, they count as other.
func TestObserveDELBounded(t *testing.T) {
	m := newMetrics(t.TempDir(), nil, false, metricsConfig{cniDel: true})
	for i := range maxDELLabels + 5 {
		m.observeDEL(cnidel.Observed{Plugin: fmt.Sprintf("p%d", i), IPAM: "host-local", Duration: time.Millisecond})
	}
	m.observeDEL(cnidel.Observed{Plugin: "bridge", Duration: time.Millisecond})
	m.observeDEL(cnidel.Observed{Plugin: "p0", IPAM: "host-local", Duration: time.Millisecond})
	m.observeDEL(cnidel.Observed{Plugin: strings.Repeat("x", 65), IPAM: "host-local", Duration: time.Millisecond})
	counts := map[[2]string]uint64{}
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sweep_cni_del_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var key [2]string
			for _, l := range s.GetLabel() {
				if l.GetName() == "plugin" {
					key[0] = l.GetValue()
				} else {
					key[1] = l.GetValue()
				}
			}
			counts[key] = s.GetHistogram().GetSampleCount()
		}
	}
	if len(counts) != maxDELLabels+1 {
		t.Errorf("%d series, want %d and other", len(counts), maxDELLabels)
	}
	for key, want := range map[[2]string]uint64{
		{"p0", "host-local"}: 2,
		{"other", "other"}:   5 + 2, // the pairs past the bound, bridge without IPAM, the over-long name
	} {
		if counts[key] != want {
			t.Errorf("%v: %d DELs, want %d (all: %v)", key, counts[key], want, counts)
		}
	}
}
