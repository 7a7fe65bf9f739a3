package uninstall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
)

func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.(prometheus.Counter).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !framework.Poll(10*time.Second, 10*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestNodeOnly runs the coordinator as under systemd: a plain directory, no
// DaemonSet, no API server. Finished content is not redone after a restart;
// new content is.
func TestNodeOnly(t *testing.T) {
	root, cfgDir, stateDir := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "state")
	victim := filepath.Join(root, "etc", "victim")
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := func() (*Coordinator, context.CancelFunc, chan error) {
		t.Helper()
		c, err := New(Config{ConfigDir: cfgDir, StateDir: stateDir, NodeName: "n", AllowedRoots: []string{root},
			Watch: WatchOptions{Debounce: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return c, cancel, done
	}
	stop := func(cancel context.CancelFunc, done chan error) {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	files := fmt.Sprintf("[%q]", victim)
	hash := ContentHash([]byte(files), []byte(`[]`))

	write(victim, "x")
	c, cancel, done := start()
	write(filepath.Join(cfgDir, cleanup.ResourceConfigName), `[]`)
	write(filepath.Join(cfgDir, cleanup.FileConfigName), files)
	waitFor(t, "the victim removed", func() bool { _, err := os.Lstat(victim); return os.IsNotExist(err) })
	waitFor(t, "the content recorded as done", func() bool {
		s, err := LoadState(stateDir)
		return err == nil && s.Get(hash) == ProgressDone
	})
	m := c.Collectors()
	if runs, removed := counter(t, m[0]), counter(t, m[1]); runs < 1 || removed != 1 {
		t.Fatalf("runs %v, removed %v", runs, removed)
	}
	stop(cancel, done)

	// A restart sees the same content: finished, nothing redone.
	write(victim, "x")
	c, cancel, done = start()
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Lstat(victim); err != nil {
		t.Fatalf("finished content redone after a restart: %v", err)
	}
	if runs := counter(t, c.Collectors()[0]); runs != 0 {
		t.Fatalf("runs after restart = %v, want 0", runs)
	}

	// New content runs.
	write(filepath.Join(cfgDir, cleanup.FileConfigName), fmt.Sprintf("[%q, %q]", victim, filepath.Join(root, "other")))
	waitFor(t, "the victim removed for the new content", func() bool { _, err := os.Lstat(victim); return os.IsNotExist(err) })

	// An invalid config does nothing and counts a failure.
	write(victim, "x")
	write(filepath.Join(cfgDir, cleanup.FileConfigName), `["/outside/the/root"]`)
	waitFor(t, "a failure counted", func() bool { return counter(t, c.Collectors()[3]) == 1 })
	if _, err := os.Lstat(victim); err != nil {
		t.Fatalf("invalid config removed files: %v", err)
	}
	stop(cancel, done)
}

var jobGVR = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

func TestConfigValidate(t *testing.T) {
	ok := Config{ConfigDir: "/c", NodeName: "n"}
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"minimal", func(*Config) {}, true},
		{"no dir", func(c *Config) { c.ConfigDir = "" }, false},
		{"no node", func(c *Config) { c.NodeName = "" }, false},
		{"DaemonSet without namespace", func(c *Config) { c.Self.Name, c.Self.GVR = "ds", DaemonSetGVR }, false},
		{"not a DaemonSet", func(c *Config) { c.Self = cleanup.Self{GVR: jobGVR, Name: "j", Namespace: "ns"} }, false},
		{"cluster role alone", func(c *Config) { c.Self.ClusterRole = "cr" }, false},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, false},
		{"relative root", func(c *Config) { c.AllowedRoots = []string{"host"} }, false},
		{"short lease with a DaemonSet", func(c *Config) {
			c.Self, c.LeaseDuration = cleanup.Self{GVR: DaemonSetGVR, Name: "ds", Namespace: "ns"}, time.Second
		}, false},
		{"short lease without a DaemonSet: unused", func(c *Config) { c.LeaseDuration = time.Second }, true},
		{"full", func(c *Config) {
			c.Self = cleanup.Self{GVR: DaemonSetGVR, Name: "ds", Namespace: "ns", ClusterRole: "cr", ClusterRoleBinding: "crb"}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
	if _, err := New(Config{ConfigDir: "/c", NodeName: "n", Self: cleanup.Self{GVR: DaemonSetGVR, Name: "ds", Namespace: "ns"}}); err == nil {
		t.Fatal("New without API access succeeded for a DaemonSet")
	}
}
