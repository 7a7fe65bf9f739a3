package daemon

import (
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/uninstall"
)

// TestValidateFields checks that each refusal names its field, which the
// command maps to a flag.
func TestValidateFields(t *testing.T) {
	ok := Config{Liveness: liveness.Config{NodeName: "n", CRITimeout: time.Second}, Prune: prune.Config{Dir: "/var/lib/cni/multus", MinAge: time.Hour}}
	tests := []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"valid", func(*Config) {}, ""},
		{"bad liveness before the node", func(c *Config) { c.Liveness.Mode, c.Liveness.NodeName = "kubelet", "" }, "Liveness.Mode"},
		{"no node", func(c *Config) { c.Liveness.NodeName = "" }, "Liveness.NodeName"},
		{"cri endpoint without scheme", func(c *Config) { c.Liveness.Mode, c.Liveness.CRIEndpoint = liveness.ModeBoth, "/run/x.sock" }, "Liveness.CRIEndpoint"},
		{"negative cri timeout", func(c *Config) { c.Liveness.Mode, c.Liveness.CRITimeout = liveness.ModeBoth, -time.Second }, "Liveness.CRITimeout"},
		{"no cache directory", func(c *Config) { c.Prune.Dir = "" }, "Prune.Dir"},
		{"negative workers", func(c *Config) { c.Prune.Workers = -3 }, "Prune.Workers"},
		{"metrics address without a port", func(c *Config) { c.MetricsAddr = "localhost" }, "MetricsAddr"},
		{"metrics address with a port out of range", func(c *Config) { c.MetricsAddr = ":97420" }, "MetricsAddr"},
		{"metrics address", func(c *Config) { c.MetricsAddr = "127.0.0.1:9742" }, ""},
		{"negative DEL cap", func(c *Config) { c.Prune.MaxReleases = -1 }, "Prune.MaxReleases"},
		{"negative DEL concurrency", func(c *Config) { c.Prune.ReleaseConcurrency = -1 }, "Prune.ReleaseConcurrency"},
		{"CNI DEL without a directory", func(c *Config) { c.CNIDel = &cnidel.Options{} }, "CNIDel.BinDirs"},
		{"CNI DEL with a negative timeout", func(c *Config) { c.CNIDel = &cnidel.Options{BinDirs: []string{"/opt/cni/bin"}, Timeout: -1} }, "CNIDel.Timeout"},
		{"CNI DEL in a relative root", func(c *Config) { c.CNIDel = &cnidel.Options{BinDirs: []string{"/opt/cni/bin"}, Root: "host"} }, "CNIDel.Root"},
		{"CNI DEL in a root, with a relative plugin directory", func(c *Config) { c.CNIDel = &cnidel.Options{BinDirs: []string{"bin"}, Root: "/host"} }, "CNIDel.BinDirs"},
		{"negative DEL rate", func(c *Config) { c.CNIDelRate = -1 }, "CNIDelRate"},
		{"negative sync timeout", func(c *Config) { c.Liveness.SyncTimeout = -1 }, "Liveness.SyncTimeout"},
		{"deleted pods' grace", func(c *Config) { c.Deleted.Grace = 30 * time.Second }, ""},
		{"negative deleted pods' grace", func(c *Config) { c.Deleted.Grace = -time.Second }, "Deleted.Grace"},
		{"deleted pods' grace under its floor", func(c *Config) { c.Deleted.Grace = time.Second }, "Deleted.Grace"},
		{"deleted pods' grace under its floor, allowed for tests", func(c *Config) { c.Deleted.Grace, c.AllowShortIntervals = time.Second, true }, ""},
		{"negative kubelet runtime request timeout", func(c *Config) { c.Prune.KubeletRuntimeRequestTimeout = -time.Second }, "Prune.KubeletRuntimeRequestTimeout"},
		{"uninstall with cri liveness", func(c *Config) {
			c.Liveness.Mode, c.Liveness.ExpectRuntime, c.Uninstall = liveness.ModeCRI, "containerd", &uninstall.Config{ConfigDir: "/c"}
		}, "Uninstall"},
		{"uninstall's own field", func(c *Config) { c.Uninstall = &uninstall.Config{ConfigDir: "/c", Timeout: -1} }, "Uninstall.Timeout"},
		{"uninstall gets the node name", func(c *Config) { c.Uninstall = &uninstall.Config{ConfigDir: "/c"} }, ""},
		{"host-local release with api liveness", func(c *Config) {
			c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = []string{"/var/lib/cni/networks"}, []string{"net1"}
		}, "Prune.HostLocalDirs"},
		{"host-local release with api liveness and no network: the liveness is said first", func(c *Config) {
			c.Prune.HostLocalDirs = []string{"/var/lib/cni/networks"}
		}, "Prune.HostLocalDirs"},
		{"host-local release with both", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"/var/lib/cni/networks"}, []string{"net1", "k8s-pod-network"}
		}, ""},
		{"host-local release with a minimum age under its floor", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"/var/lib/cni/networks"}, []string{"net1"}
			c.Prune.MinAge = 2 * time.Minute
		}, "Prune.MinAge"},
		{"host-local release over the floor of the kubelet's default, under that of its raised timeout", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"/var/lib/cni/networks"}, []string{"net1"}
			c.Prune.MinAge, c.Prune.KubeletRuntimeRequestTimeout = 6*time.Minute, 4*time.Minute
		}, "Prune.MinAge"},
		{"host-local release under the floor, allowed for tests", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"/var/lib/cni/networks"}, []string{"net1"}
			c.Prune.MinAge, c.AllowShortIntervals = 0, true
		}, ""},
		{"runtime cache relative", func(c *Config) { c.Prune.RuntimeDir = "var/lib/cni/results" }, "Prune.RuntimeDir"},
		{"runtime cache without DEL, api liveness", func(c *Config) { c.Prune.RuntimeDir = "/var/lib/cni/results" }, ""},
		{"runtime cache DEL with api liveness", func(c *Config) {
			c.Prune.RuntimeDir, c.CNIDel = "/var/lib/cni/results", &cnidel.Options{BinDirs: []string{"/opt/cni/bin"}}
		}, "Prune.RuntimeDir"},
		{"runtime cache DEL with both", func(c *Config) {
			c.Liveness.Mode, c.Prune.RuntimeDir, c.CNIDel = liveness.ModeBoth, "/var/lib/cni/results", &cnidel.Options{BinDirs: []string{"/opt/cni/bin"}}
		}, ""},
		{"host-local release of a relative directory", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"networks"}, []string{"net1"}
		}, "Prune.HostLocalDirs"},
		{"host-local release in no named network", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs = liveness.ModeBoth, []string{"/var/lib/cni/networks"}
		}, "Prune.HostLocalNetworks"},
		{"host-local network without a directory", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"net1"}
		}, "Prune.HostLocalNetworks"},
		{"host-local network that is a path", func(c *Config) {
			c.Liveness.Mode, c.Prune.HostLocalDirs, c.Prune.HostLocalNetworks = liveness.ModeBoth, []string{"/var/lib/cni/networks"}, []string{"../podman"}
		}, "Prune.HostLocalNetworks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			var fe *FieldError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate() = %v", err)
			case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
				t.Fatalf("Validate() = %v (%#v), want a FieldError for %s", err, fe, tt.field)
			}
		})
	}
}

// TestCRILivenessReadsNoKubeconfig: with cri liveness the daemon builds its
// runtime client and never asks for the API server's config.
func TestCRILivenessReadsNoKubeconfig(t *testing.T) {
	cfg := Config{
		Liveness: liveness.Config{Mode: liveness.ModeCRI, ExpectRuntime: "containerd", CRITimeout: time.Second,
			RESTConfig: func() (*rest.Config, error) {
				t.Error("cri liveness asked for the kubeconfig")
				return nil, errors.New("no")
			}},
		Schedule: "@hourly", Prune: prune.Config{Dir: t.TempDir(), MinAge: time.Hour},
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rt := d.views.Runtime(); rt == nil || rt.Endpoint() == "" || d.views.Pods() != nil {
		t.Fatalf("runtime %v, pod view %v", rt, d.views.Pods())
	}
	cfg.Liveness.Mode, cfg.Liveness.NodeName = liveness.ModeBoth, "n"
	cfg.Liveness.RESTConfig = func() (*rest.Config, error) { return nil, errors.New("no kubeconfig found") }
	if _, err := New(cfg); err == nil || err.Error() != "no kubernetes access: no kubeconfig found" {
		t.Fatalf("both liveness without a kubeconfig: %v", err)
	}
}
