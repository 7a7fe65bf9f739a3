package prune_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/prune"
)

func TestConfigValidate(t *testing.T) {
	hostLocal := func(c *prune.Config) {
		c.HostLocalDirs, c.HostLocalNetworks = []string{"/var/lib/cni/networks"}, []string{"net1"}
	}
	for _, tc := range []struct {
		name  string
		mod   func(*prune.Config)
		field string // "": valid
	}{
		{"zero", func(*prune.Config) {}, ""},
		{"host-local", hostLocal, ""},
		{"negative min age", func(c *prune.Config) { c.MinAge = -time.Second }, "MinAge"},
		{"no directory", func(c *prune.Config) { c.Dir = "" }, "Dir"},
		{"negative workers", func(c *prune.Config) { c.Workers = -3 }, "Workers"},
		{"relative host-local dir", func(c *prune.Config) { hostLocal(c); c.HostLocalDirs = []string{"networks"} }, "HostLocalDirs"},
		{"host-local dir without networks", func(c *prune.Config) { hostLocal(c); c.HostLocalNetworks = nil }, "HostLocalNetworks"},
		{"networks without a dir", func(c *prune.Config) { c.HostLocalNetworks = []string{"net1"} }, "HostLocalNetworks"},
		{"network that is a path", func(c *prune.Config) { hostLocal(c); c.HostLocalNetworks = []string{"../net1"} }, "HostLocalNetworks"},
		{"relative runtime cache", func(c *prune.Config) { c.RuntimeDir = "var/lib/cni/results" }, "RuntimeDir"},
		{"negative DEL cap", func(c *prune.Config) { c.MaxReleases = -1 }, "MaxReleases"},
		{"negative DEL concurrency", func(c *prune.Config) { c.ReleaseConcurrency = -1 }, "ReleaseConcurrency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := prune.Config{Dir: "/var/lib/cni/multus", MinAge: time.Hour}
			tc.mod(&c)
			err := c.Validate()
			fe := (*field.Error)(nil)
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.field == "":
			case !errors.As(err, &fe) || fe.Field != tc.field:
				t.Fatalf("err %v (%#v), want a field error on %s", err, fe, tc.field)
			}
		})
	}
}
