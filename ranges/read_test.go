package ranges_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/ranges"
)

// sandboxes is a fake list of the runtime's sandboxes.
type sandboxes map[cachefile.SandboxID]struct{}

func (s sandboxes) Has(id cachefile.SandboxID) bool { _, ok := s[id]; return ok }

func sandboxID(t *testing.T, c byte) (string, cachefile.SandboxID) {
	t.Helper()
	s := strings.Repeat(string(c), 64)
	id, ok := cachefile.ParseSandboxID(s)
	if !ok {
		t.Fatalf("%s is no sandbox ID", s)
	}
	return s, id
}

func write(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

// fixture is a configuration directory with network net1, 10.1.0.0/29
// (.2 to .6: five addresses) and fd00::/125 (::2 to ::7: six), and its
// reservations: .2 by a listed sandbox, .3 by an unlisted one for an hour,
// .4 by an unlisted one for a second, .5 by nerdctl's container (no
// sandbox ID), ::2 by a symlink; plus entries that hold no address of the
// ranges. It returns the configuration directory and the runtime's list.
func fixture(t *testing.T) (string, ranges.Sandboxes) {
	t.Helper()
	root := t.TempDir()
	conf, data := filepath.Join(root, "net.d"), filepath.Join(root, "networks")
	write(t, filepath.Join(conf, "10-net1.conflist"), `{"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"`+data+`",
		"ranges":[[{"subnet":"10.1.0.0/29"}],[{"subnet":"fd00::/125"}]]}}]}`, time.Time{})
	write(t, filepath.Join(conf, "20-other.conf"), `{"name":"calico","type":"calico","ipam":{"type":"calico-ipam"}}`, time.Time{})
	write(t, filepath.Join(conf, "30-broken.conf"), `{"name":`, time.Time{})
	write(t, filepath.Join(conf, "README"), `not read`, time.Time{})
	live, liveID := sandboxID(t, 'a')
	dead, _ := sandboxID(t, 'b')
	young, _ := sandboxID(t, 'c')
	old := time.Now().Add(-time.Hour)
	net := filepath.Join(data, "net1")
	write(t, filepath.Join(net, "10.1.0.2"), live+"\r\neth0", old)
	write(t, filepath.Join(net, "10.1.0.3"), dead+"\r\neth0", old)
	write(t, filepath.Join(net, "10.1.0.4"), young+"\r\neth0", time.Now())
	write(t, filepath.Join(net, "10.1.0.5"), "default-"+dead+"\r\neth0", old)
	if err := os.Symlink(filepath.Join(net, "10.1.0.3"), filepath.Join(net, "fd00::2")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(net, "10.9.0.2"), dead+"\r\neth0", old) // outside the ranges
	write(t, filepath.Join(net, "10.1.0.1"), dead+"\r\neth0", old) // the gateway
	write(t, filepath.Join(net, "notes"), "x", old)
	write(t, filepath.Join(net, "lock"), "", old)
	write(t, filepath.Join(net, "last_reserved_ip.0"), "10.1.0.4", old)
	return conf, sandboxes{liveID: {}}
}

func TestRead(t *testing.T) {
	conf, sb := fixture(t)
	nets, problems := ranges.Networks(conf)
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "30-broken.conf") {
		t.Errorf("problems %v, want the broken file's", problems)
	}
	if len(nets) != 1 || nets[0].Name != "net1" {
		t.Fatalf("networks %+v", nets)
	}
	tests := []struct {
		name string
		sb   ranges.Sandboxes
		want map[string]map[ranges.State]float64
	}{
		{name: "with the runtime's sandboxes", sb: sb, want: map[string]map[ranges.State]float64{
			"10.1.0.0/29": {ranges.StateInUse: 1, ranges.StateDead: 1, ranges.StateYoung: 1, ranges.StateUnknown: 1, ranges.StateFree: 1},
			"fd00::/125":  {ranges.StateInUse: 0, ranges.StateDead: 0, ranges.StateYoung: 0, ranges.StateUnknown: 1, ranges.StateFree: 5},
		}},
		// Who holds them is not guessed.
		{name: "without", want: map[string]map[ranges.State]float64{
			"10.1.0.0/29": {ranges.StateReserved: 4, ranges.StateFree: 1},
			"fd00::/125":  {ranges.StateReserved: 1, ranges.StateFree: 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := ranges.Read(context.Background(), nets, ranges.Options{Sandboxes: tt.sb, Grace: 5 * time.Minute})
			if len(rep.Problems) != 0 {
				t.Errorf("problems %v", rep.Problems)
			}
			if rep.Other["net1"] != 3 {
				t.Errorf("other entries %d, want 3 (outside the ranges, the gateway, notes)", rep.Other["net1"])
			}
			if len(rep.Counts) != len(tt.want) {
				t.Fatalf("counts %+v", rep.Counts)
			}
			for _, c := range rep.Counts {
				want := tt.want[c.Subnet.String()]
				if len(c.Addresses) != len(want) {
					t.Errorf("%s: %v, want %v", c.Subnet, c.Addresses, want)
				}
				sum := 0.0
				for s, n := range c.Addresses {
					sum += n
					if want[s] != n {
						t.Errorf("%s: %s %v, want %v", c.Subnet, s, n, want[s])
					}
				}
				if sum != c.Size {
					t.Errorf("%s: states sum to %v, size %v", c.Subnet, sum, c.Size)
				}
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	root := t.TempDir()
	if nets, problems := ranges.Networks(filepath.Join(root, "none")); len(nets)+len(problems) != 0 {
		t.Errorf("a missing directory: %v, %v", nets, problems)
	}
	// A network whose directory host-local has not made yet: all free.
	nets, err := ranges.ParseConfig([]byte(`{"name":"n","type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24","dataDir":"` + root + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	rep := ranges.Read(context.Background(), nets, ranges.Options{Sandboxes: sandboxes{}})
	if len(rep.Counts) != 1 || rep.Counts[0].Addresses[ranges.StateFree] != 253 || rep.Counts[0].Addresses[ranges.StateDead] != 0 {
		t.Errorf("counts %+v", rep.Counts)
	}
	// A data directory that is not there may be one not mounted: not
	// counted rather than all free.
	nets[0].DataDir = filepath.Join(root, "none")
	rep = ranges.Read(context.Background(), nets, ranges.Options{Sandboxes: sandboxes{}})
	if len(rep.Counts) != 0 || len(rep.Problems) != 1 {
		t.Errorf("counts %+v, problems %v; want a problem", rep.Counts, rep.Problems)
	}
}

func TestNetworksNoSymlink(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "net.d")
	write(t, filepath.Join(root, "real.conf"), hostLocal(`"subnet":"10.1.0.0/24"`), time.Time{})
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real.conf"), filepath.Join(conf, "10-link.conf")); err != nil {
		t.Fatal(err)
	}
	nets, problems := ranges.Networks(conf)
	if len(nets) != 0 || len(problems) != 1 {
		t.Errorf("a symlinked configuration: %v, %v; want a problem and no network", nets, problems)
	}
}
