package daemon

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
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
