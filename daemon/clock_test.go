package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
)

// TestClockStepped: each set of the wall clock is counted and logged with
// its size and direction; a forward one is a warning that says until when
// ages are held back, and adds to sweep_clock_forward_steps_seconds_total.
// The clocks are fakes: the host's are never set.
func TestClockStepped(t *testing.T) {
	const minAge = 15 * time.Minute
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		steps     []time.Duration
		level     slog.Level // of the last line
		direction string
		forward   time.Duration // forward_steps of the last line
		counter   float64       // sweep_clock_forward_steps_seconds_total
	}{
		{"set to the time read", []time.Duration{0}, slog.LevelInfo, "none", 0, 0},
		{"backward", []time.Duration{-time.Second}, slog.LevelInfo, "backward", 0, 0},
		{"forward", []time.Duration{time.Hour}, slog.LevelWarn, "forward", time.Hour, 3600},
		{"two forward steps add up", []time.Duration{time.Second, 2 * time.Second}, slog.LevelWarn, "forward", 3 * time.Second, 3},
		{"backward after forward", []time.Duration{time.Hour, -time.Hour}, slog.LevelInfo, "backward", 0, 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			wall := start
			sets, measured := make(chan struct{}), make(chan struct{})
			clock := prune.NewClockGuard(
				prune.WithWallClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return wall }),
				prune.WithBootClock(func() (time.Duration, error) { return 24 * time.Hour, nil }),
				prune.WithSetWatcher(func(ctx context.Context, check func(bool)) error {
					check(false)
					measured <- struct{}{}
					for {
						select {
						case <-ctx.Done():
							return nil
						case <-sets:
							check(true)
							measured <- struct{}{}
						}
					}
				}))
			var logs bytes.Buffer
			d := &Daemon{
				cfg:     Config{Prune: prune.Config{MinAge: minAge}},
				log:     slog.New(slog.NewJSONHandler(&logs, nil)),
				clock:   clock,
				metrics: report.NewMetrics(report.MetricsConfig{Prune: prune.Config{Dir: t.TempDir()}}),
			}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			watchClock(ctx, &wg, d.clock, d.log, d.clockStepped)
			<-measured
			for _, s := range tc.steps {
				mu.Lock()
				wall = wall.Add(s)
				mu.Unlock()
				sets <- struct{}{}
				<-measured
			}
			cancel()
			wg.Wait()

			lines := bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n"))
			if len(lines) != len(tc.steps) {
				t.Fatalf("%d log lines, want one per step:\n%s", len(lines), logs.String())
			}
			var last struct {
				Level     slog.Level
				Step      time.Duration
				Direction string
				Forward   time.Duration `json:"forward_steps"`
				Trusted   time.Time     `json:"ages_trusted_from"`
			}
			if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil {
				t.Fatal(err)
			}
			if last.Level != tc.level || last.Step != tc.steps[len(tc.steps)-1] || last.Direction != tc.direction || last.Forward != tc.forward {
				t.Errorf("last line %s, want level %s, step %s, direction %s, forward_steps %s",
					lines[len(lines)-1], tc.level, tc.steps[len(tc.steps)-1], tc.direction, tc.forward)
			}
			// The steps are all at one reading of the boot clock: ages are
			// trusted again a minimum age after it.
			if want := wall.Add(minAge); tc.forward > 0 && !last.Trusted.Equal(want) {
				t.Errorf("ages_trusted_from %s, want %s", last.Trusted, want)
			}
			got := counters(t, d.metrics.Registry())
			if got["sweep_clock_steps_total"] != float64(len(tc.steps)) || got["sweep_clock_forward_steps_seconds_total"] != tc.counter {
				t.Errorf("steps %v, forward seconds %v; want %d, %v", got["sweep_clock_steps_total"],
					got["sweep_clock_forward_steps_seconds_total"], len(tc.steps), tc.counter)
			}
		})
	}
}

// counters returns the registry's counters without labels, by name.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.Counter != nil && len(m.GetLabel()) == 0 {
				got[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}
