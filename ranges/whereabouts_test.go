package ranges

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sweep-k8s/sweep/prune"
)

// cacheContent is a libcni cache file of network with config conf and the
// addresses ips, as libcni writes it (config base64, as a []byte).
func cacheContent(t *testing.T, network, conf string, ips ...string) []byte {
	t.Helper()
	type ip struct {
		Address string `json:"address"`
	}
	var result struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []ip   `json:"ips"`
	}
	result.CNIVersion = "1.0.0"
	for _, a := range ips {
		result.IPs = append(result.IPs, ip{a})
	}
	data, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": "c", "config": []byte(conf), "ifName": "net1",
		"networkName": network, "result": result})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestWhereaboutsCount: the addresses of a live pod's results file count
// when its network (a plugin, or any plugin of a list) allocates with
// Whereabouts; others, files that do not parse, files not kept live and
// symlinks count nothing; networks past the bound are summed as other.
func TestWhereaboutsCount(t *testing.T) {
	const wb = `{"cniVersion":"0.3.1","name":"%s","type":"macvlan","ipam":{"type":"whereabouts","range":"10.10.0.0/24"}}`
	const list = `{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"bridge","ipam":{}},{"type":"tuning"},{"type":"ipvlan","ipam":{"type":"whereabouts"}}]}`
	const hl = `{"cniVersion":"0.3.1","name":"%s","type":"bridge","ipam":{"type":"host-local","subnet":"10.20.0.0/24"}}`
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	g := NewWhereaboutsHeld()
	onFile := g.File
	n := 0
	file := func(content []byte, reason prune.Reason, remove bool) string {
		t.Helper()
		n++
		name := fmt.Sprint("f", n)
		if err := os.WriteFile(filepath.Join(dir, "results", name), content, 0o600); err != nil {
			t.Fatal(err)
		}
		onFile(prune.File{Cache: prune.CacheMultus, CacheDir: dir, Phase: prune.PhaseResults, Name: name, Reason: reason, Remove: remove})
		return name
	}
	file(cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.5/24"), prune.ReasonPodLive, false)
	target := file(cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.6/24"), prune.ReasonSandboxLive, false)
	file(cacheContent(t, "dual", fmt.Sprintf(list, "dual"), "10.11.0.2/24", "fd00::2/64"), prune.ReasonPodLive, false)
	file(cacheContent(t, "hl", fmt.Sprintf(hl, "hl"), "10.20.0.2/24"), prune.ReasonPodLive, false)
	file([]byte(`{"kind":"cniCacheV1","config":"not base64!"`), prune.ReasonPodLive, false)
	file(cacheContent(t, "wb-none", fmt.Sprintf(wb, "wb-none")), prune.ReasonPodLive, false)
	file(cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.7/24"), prune.ReasonPodGone, true)
	file(cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.8/24"), prune.ReasonTooYoung, false)
	// A symlink where a live file was is not followed.
	if err := os.Symlink(target, filepath.Join(dir, "results", "link")); err != nil {
		t.Fatal(err)
	}
	onFile(prune.File{Cache: prune.CacheMultus, CacheDir: dir, Phase: prune.PhaseResults, Name: "link", Reason: prune.ReasonPodLive})
	c := g.live.whereabouts()
	want := map[string]int{"wb": 2, "dual": 2}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("counted %v, want %v", c, want)
	}
	for i := range maxWhereaboutsNetworks + 3 {
		net := fmt.Sprint("net-", i)
		file(cacheContent(t, net, fmt.Sprintf(wb, net), "10.10.1.1/24"), prune.ReasonPodLive, false)
	}
	c = g.live.whereabouts()
	if len(c) != maxWhereaboutsNetworks+1 || c["other"] != 5 {
		t.Fatalf("%d networks, other %d; want %d and 5", len(c), c["other"], maxWhereaboutsNetworks+1)
	}
}
