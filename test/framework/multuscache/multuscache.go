// Package multuscache writes multus CNI cache files of the real shapes (see
// prune/testdata/multus-real) for tests, benchmarks and the demo.
package multuscache

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Pod identifies the pod a cache entry belongs to.
type Pod struct {
	Namespace, Name, UID string
}

// Attachment is one network of a sandbox: a results file.
type Attachment struct {
	Network string // network name, e.g. k8s-pod-network
	IfName  string // eth0, net1, ...
	IP      string // e.g. 10.88.0.3/16
	// IPAM is the IPAM plugin's type in the cached config: host-local
	// (the default) or whereabouts.
	IPAM string
}

// DefaultAttachments returns the two networks of the thin-bridge fixture.
func DefaultAttachments() []Attachment {
	return []Attachment{
		{Network: "k8s-pod-network", IfName: "eth0", IP: "10.88.0.3/16"},
		{Network: "sec-net-default", IfName: "net1", IP: "192.168.50.2/24"},
	}
}

// NewSandboxID returns a random 64-hex sandbox ID.
func NewSandboxID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type cacheFile struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	Config      string      `json:"config"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	Netns       string      `json:"netns"`
	CNIArgs     [][2]string `json:"cniArgs"`
	Result      any         `json:"result"`
}

// ResultsJSON returns the content of a thin-mode results file: multus's five
// CNI args followed by the runtime's again, as the real plugin writes them.
func ResultsJSON(sandbox string, pod Pod, a Attachment) []byte {
	conf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"bridge","bridge":"cni0","isGateway":true,"ipam":{"type":"host-local","subnet":"10.88.0.0/16","dataDir":"/var/lib/cni/networks"}}`, a.Network)
	if a.IPAM == "whereabouts" {
		conf = fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"10.10.0.0/16"}}`, a.Network)
	}
	netns := "/var/run/netns/cni-" + sandbox[:8] + "-" + sandbox[8:12] + "-" + sandbox[12:16] + "-" + sandbox[16:20] + "-" + sandbox[20:32]
	args := [][2]string{
		{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", pod.UID},
	}
	args = append(args, [2]string{"IgnoreUnknown", "1"})
	args = append(args, args[1:5]...)
	cf := cacheFile{
		Kind: "cniCacheV1", ContainerID: sandbox, Config: base64.StdEncoding.EncodeToString([]byte(conf)),
		IfName: a.IfName, NetworkName: a.Network, Netns: netns, CNIArgs: args,
		Result: map[string]any{
			"cniVersion": "0.3.1", "dns": map[string]any{},
			"interfaces": []map[string]string{
				{"mac": "3a:0f:e6:2c:b6:2e", "name": "cni0"},
				{"mac": "f6:b4:20:5c:74:d0", "name": "veth" + sandbox[:8]},
				{"mac": "e2:33:bc:9b:fd:56", "name": a.IfName, "sandbox": netns},
			},
			"ips": []map[string]any{{"address": a.IP, "gateway": "10.88.0.1", "interface": 2, "version": "4"}},
		},
	}
	data, _ := json.Marshal(cf) // cannot fail: plain types
	return data
}

// ScratchJSON returns the content of a scratch netconf file naming the
// attachments' delegates.
func ScratchJSON(atts []Attachment) []byte {
	type delegate struct {
		Conf              map[string]any `json:"Conf"`
		ConfList          map[string]any `json:"ConfList"`
		Name              string         `json:"Name"`
		IsFilterV4Gateway bool           `json:"IsFilterV4Gateway"`
		IsFilterV6Gateway bool           `json:"IsFilterV6Gateway"`
		Bytes             []byte         `json:"Bytes"`
	}
	ds := make([]delegate, len(atts))
	for i, a := range atts {
		conf := map[string]any{"cniVersion": "0.3.1", "ipam": map[string]any{"type": "host-local"}, "name": a.Network, "type": "bridge"}
		b, _ := json.Marshal(conf)
		ds[i] = delegate{Conf: conf, ConfList: map[string]any{}, Name: a.Network, Bytes: b}
	}
	data, _ := json.Marshal(ds)
	return data
}

// Sandbox writes the files of one sandbox as multus leaves them after a
// successful ADD: the scratch file and one results file per attachment, all
// with mode 0600 and modification time mtime. It returns the paths written.
func Sandbox(dir, sandbox string, pod Pod, atts []Attachment, mtime time.Time) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(dir, sandbox)}
	if err := writeFile(paths[0], ScratchJSON(atts), mtime); err != nil {
		return nil, err
	}
	for _, a := range atts {
		p := filepath.Join(dir, "results", a.Network+"-"+sandbox+"-"+a.IfName)
		if err := writeFile(p, ResultsJSON(sandbox, pod, a), mtime); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// FailedAdd writes only the scratch file, as multus leaves it when a
// delegate's ADD failed and the results were rolled back.
func FailedAdd(dir, sandbox string, mtime time.Time) (string, error) {
	return Scratch(dir, sandbox, DefaultAttachments(), mtime)
}

// Scratch writes only the scratch file of a sandbox whose attachments are
// atts, as multus does at the start of ADD, before any delegate runs: a test
// that runs the delegates itself (through libcni, whose cache writes the
// results files) adds the rest. It returns the path written.
func Scratch(dir, sandbox string, atts []Attachment, mtime time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, sandbox)
	return p, writeFile(p, ScratchJSON(atts), mtime)
}

func writeFile(path string, data []byte, mtime time.Time) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return os.Chtimes(path, mtime, mtime)
}

// Node writes the cache of a busy node: n sandboxes with the default
// attachments (one scratch and two results files each), the first len(live)
// belonging to live pods and the rest to deleted ones, all with mtime.
func Node(dir string, n int, live []Pod, mtime time.Time) error {
	for i := range n {
		pod := Pod{Namespace: "default", Name: fmt.Sprintf("stale-%d", i), UID: NewUID()}
		if i < len(live) {
			pod = live[i]
		}
		if _, err := Sandbox(dir, NewSandboxID(), pod, DefaultAttachments(), mtime); err != nil {
			return err
		}
	}
	return nil
}

// NewUID returns a random pod UID of the form the API server gives.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return uuid(b[:])
}

// UID returns a pod UID of the API server's form that is the same for the
// same name, so that tests can name their pods' UIDs.
func UID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return uuid(sum[:16])
}

func uuid(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// RuntimeResultsJSON returns the content of a results file of the runtime's
// own libcni cache (containerd, CRI-O: /var/lib/cni/results), for the pod's
// primary network: the runtime's CNI args once, and the network's conflist
// as its config. A pod with no UID gives the args of a container that is no
// pod's sandbox (podman's CNI backend: namespace and name, no UID).
func RuntimeResultsJSON(sandbox string, pod Pod, a Attachment) []byte {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.0.0/16"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`, a.Network)
	netns := "/var/run/netns/cni-" + sandbox[:8] + "-" + sandbox[8:12] + "-" + sandbox[12:16] + "-" + sandbox[16:20] + "-" + sandbox[20:32]
	args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", sandbox}}
	if pod.UID != "" {
		args = append(args, [2]string{"K8S_POD_UID", pod.UID})
	}
	cf := cacheFile{
		Kind: "cniCacheV1", ContainerID: sandbox, Config: base64.StdEncoding.EncodeToString([]byte(conf)),
		IfName: a.IfName, NetworkName: a.Network, Netns: netns, CNIArgs: args,
		Result: map[string]any{
			"cniVersion": "1.0.0", "dns": map[string]any{},
			"interfaces": []map[string]string{
				{"mac": "3a:0f:e6:2c:b6:2e", "name": "cni0"},
				{"mac": "f6:b4:20:5c:74:d0", "name": "veth" + sandbox[:8]},
				{"mac": "e2:33:bc:9b:fd:56", "name": a.IfName, "sandbox": netns},
			},
			"ips": []map[string]any{{"address": a.IP, "gateway": "10.88.0.1", "interface": 2}},
		},
	}
	data, _ := json.Marshal(cf) // cannot fail: plain types
	return data
}

// RuntimeSandbox writes the runtime's own cache file of one sandbox's primary
// network, `<dir>/<network>-<sandbox>-eth0`, with mode 0600 and modification
// time mtime, and returns its path.
func RuntimeSandbox(dir, sandbox string, pod Pod, mtime time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	a := DefaultAttachments()[0]
	p := filepath.Join(dir, a.Network+"-"+sandbox+"-"+a.IfName)
	return p, writeFile(p, RuntimeResultsJSON(sandbox, pod, a), mtime)
}
