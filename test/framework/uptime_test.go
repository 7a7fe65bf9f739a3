package framework_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
)

// TestStartUp: the command reads the uptime it was given, fresh or long,
// from /proc/uptime (what sweepd reads) and its children too.
func TestStartUp(t *testing.T) {
	for _, up := range []time.Duration{time.Minute, 48 * time.Hour} {
		cmd := exec.Command("sh", "-c", "cat /proc/uptime; sh -c 'cat /proc/uptime'")
		var out strings.Builder
		cmd.Stdout = &out
		if err := framework.StartUp(cmd, up); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			secs, err := strconv.ParseFloat(strings.Fields(line)[0], 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := time.Duration(secs * float64(time.Second)); got < up || got > up+10*time.Second {
				t.Errorf("uptime %s, want %s", got, up)
			}
		}
	}
}
