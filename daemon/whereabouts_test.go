package daemon

import (
	"encoding/json"
	"fmt"
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

// TestWhereaboutsCount: the addresses of a live pod's attachment count when
// its network (a plugin, or any plugin of a list) allocates with
// Whereabouts; others and files that do not parse count nothing; networks
// past the bound are summed as other.
func TestWhereaboutsCount(t *testing.T) {
	const wb = `{"cniVersion":"0.3.1","name":"%s","type":"macvlan","ipam":{"type":"whereabouts","range":"10.10.0.0/24"}}`
	const list = `{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"bridge","ipam":{}},{"type":"tuning"},{"type":"ipvlan","ipam":{"type":"whereabouts"}}]}`
	const hl = `{"cniVersion":"0.3.1","name":"%s","type":"bridge","ipam":{"type":"host-local","subnet":"10.20.0.0/24"}}`
	c := whereaboutsCount{}
	for _, f := range [][]byte{
		cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.5/24"),
		cacheContent(t, "wb", fmt.Sprintf(wb, "wb"), "10.10.0.6/24"),
		cacheContent(t, "dual", fmt.Sprintf(list, "dual"), "10.11.0.2/24", "fd00::2/64"),
		cacheContent(t, "hl", fmt.Sprintf(hl, "hl"), "10.20.0.2/24"),
		[]byte(`{"kind":"cniCacheV1","config":"not base64!"`),
		cacheContent(t, "wb-none", fmt.Sprintf(wb, "wb-none")),
	} {
		c.add(prune.File{}, f)
	}
	want := whereaboutsCount{"wb": 2, "dual": 2}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("counted %v, want %v", c, want)
	}
	for i := range maxWhereaboutsNetworks + 3 {
		n := fmt.Sprint("net-", i)
		c.add(prune.File{}, cacheContent(t, n, fmt.Sprintf(wb, n), "10.10.1.1/24"))
	}
	if len(c) != maxWhereaboutsNetworks+1 || c["other"] != 5 {
		t.Fatalf("%d networks, other %d; want %d and 5", len(c), c["other"], maxWhereaboutsNetworks+1)
	}
}
