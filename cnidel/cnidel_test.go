package cnidel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/internal/field"
)

const fixtures = "../prune/testdata/multus-real"

func readFixture(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// cache returns a cniCacheV1 file with the given config and fields.
func cache(config, extra string) []byte {
	return []byte(`{"kind":"cniCacheV1","containerId":"0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce",` +
		`"config":"` + base64.StdEncoding.EncodeToString([]byte(config)) + `","ifName":"eth0","networkName":"net"` + extra + `}`)
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name        string
		data        []byte
		wantErr     string // substring; empty: success
		wantNetwork string // name of the parsed config
		wantList    bool
		wantNS      string
		wantArgs    int
	}{
		{
			name:        "thin multus, single bridge config",
			data:        readFixture(t, "thin-bridge/results/sec-net-default-2a9cc5e4f8b450e601bf2382e1b1e3d1f3c75dcc540ed467d27ac4be55130087-net1"),
			wantNetwork: "sec-net-default", wantNS: "/var/run/netns/cni-acc-2a9cc5e4f8b4", wantArgs: 10,
		},
		{
			name:        "thin multus, cluster network",
			data:        readFixture(t, "thin-bridge/results/k8s-pod-network-2a9cc5e4f8b450e601bf2382e1b1e3d1f3c75dcc540ed467d27ac4be55130087-eth0"),
			wantNetwork: "k8s-pod-network", wantNS: "/var/run/netns/cni-acc-2a9cc5e4f8b4", wantArgs: 10,
		},
		{
			name:        "thick multus, cilium conflist",
			data:        readFixture(t, "thick-issue-1488/results/cilium-0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce-eth0"),
			wantNetwork: "cilium", wantList: true, wantNS: "/var/run/netns/cni-c54a077d-d037-cfee-9539-3d00c421cced", wantArgs: 5,
		},
		{name: "no netns, no args", data: cache(`{"cniVersion":"1.0.0","name":"net","type":"bridge"}`, ""), wantNetwork: "net"},
		{name: "not JSON", data: []byte(`{"kind":`), wantErr: "malformed"},
		// Files the prune's parser reads as another pod or sandbox than
		// encoding/json would: refused, so no DEL acts on another identity.
		{name: "containerId in another case", data: bytes.Replace(cache(`{}`, ""), []byte(`"containerId"`), []byte(`"containerId":"x","ContainerID"`), 1), wantErr: "ambiguous"},
		{name: "pod UID twice, two values", data: []byte(`{"kind":"cniCacheV1","containerId":"abc","cniArgs":[["K8S_POD_UID","a"],["K8S_POD_UID","b"]],"config":"e30=","ifName":"eth0","networkName":"net"}`), wantErr: "ambiguous"},
		{name: "pre-2019 bare result", data: []byte(`{"cniVersion":"0.3.1","ips":[]}`), wantErr: ErrNotCache.Error()},
		{name: "no config", data: []byte(`{"kind":"cniCacheV1","containerId":"abc","ifName":"eth0","networkName":"net"}`), wantErr: "no config"},
		{name: "config not base64", data: []byte(`{"kind":"cniCacheV1","containerId":"abc","config":"!!","ifName":"eth0","networkName":"net"}`), wantErr: "decode"},
		{name: "container ID with a slash", data: bytes.Replace(cache(`{}`, ""), []byte(`"0539`), []byte(`"../0539`), 1), wantErr: "containerID"},
		{name: "interface name with a slash", data: bytes.Replace(cache(`{}`, ""), []byte(`"eth0"`), []byte(`"../eth0"`), 1), wantErr: "interface name"},
		{name: "interface name too long", data: bytes.Replace(cache(`{}`, ""), []byte(`"eth0"`), []byte(`"eth0123456789abcdef"`), 1), wantErr: "too long"},
		{name: "network name with a slash", data: bytes.Replace(cache(`{}`, ""), []byte(`"net"`), []byte(`"a/../../b"`), 1), wantErr: "network name"},
		{name: "config without type", data: cache(`{"cniVersion":"1.0.0","name":"net"}`, ""), wantErr: "missing 'type'"},
		{name: "config name with a slash", data: cache(`{"cniVersion":"1.0.0","name":"../x","type":"bridge"}`, ""), wantErr: "network name"},
		{name: "conflist without plugins", data: cache(`{"cniVersion":"1.0.0","name":"net","plugins":[]}`, ""), wantErr: "no plugins"},
		{name: "config not JSON", data: cache(`{"name":`, ""), wantErr: "parse cached config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Decode(tc.data)
			var n network
			if err == nil {
				n, err = a.network()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.name() != tc.wantNetwork || (n.list != nil) != tc.wantList {
				t.Errorf("network %q (list %v), want %q (list %v)", n.name(), n.list != nil, tc.wantNetwork, tc.wantList)
			}
			if a.NetNS != tc.wantNS || len(a.CNIArgs) != tc.wantArgs {
				t.Errorf("netns %q, %d args; want %q, %d", a.NetNS, len(a.CNIArgs), tc.wantNS, tc.wantArgs)
			}
			if a.NetworkName != tc.wantNetwork || a.IfName == "" || len(a.ContainerID) != 64 {
				t.Errorf("decoded %+v", a)
			}
		})
	}
}

func TestLiveNetNS(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "cni-gone")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/proc/self/ns/net", link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"",
		"/var/run/netns/does-not-exist",
		plain,               // an unmounted leftover
		"/proc/self/ns/net", // a PID path names another process after a reboot
		"/proc/1/ns/net",    // the host's
		link,                // a symlink to one
		"/proc/../proc/1/ns/net",
	} {
		if got := liveNetNS("", path); got != "" {
			t.Errorf("liveNetNS(%q) = %q, want empty", path, got)
		}
	}
}

// writePlugin writes a shell script as a CNI plugin into dir.
func writePlugin(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseRunsDEL(t *testing.T) {
	bin, out, scratch := t.TempDir(), t.TempDir(), t.TempDir()
	// Records what a plugin gets: its environment and its stdin.
	writePlugin(t, bin, "rec", `env > "$OUT/$CNI_COMMAND.$$.env"; cat > "$OUT/$CNI_COMMAND.$$.stdin"`)
	data := cache(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"rec"},{"type":"rec","x":1}]}`,
		`,"netns":"/var/run/netns/gone","cniArgs":[["K8S_POD_NAME","p"],["K8S_POD_UID","u"]],`+
			`"capabilityArgs":{"portMappings":[{"hostPort":80}]},"result":{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}`)
	r, err := New(Options{BinDirs: []string{bin}, Timeout: 10 * time.Second, ScratchDir: scratch})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUT", out)
	if err := r.Release(t.Context(), "net-x-eth0", data); err != nil {
		t.Fatal(err)
	}
	envs, _ := filepath.Glob(filepath.Join(out, "DEL.*.env"))
	stdins, _ := filepath.Glob(filepath.Join(out, "DEL.*.stdin"))
	if len(envs) != 2 || len(stdins) != 2 {
		t.Fatalf("%d DEL calls recorded, want 2", len(envs))
	}
	env := string(must(os.ReadFile(envs[0])))
	for _, want := range []string{
		"CNI_COMMAND=DEL", "CNI_CONTAINERID=0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce",
		"CNI_IFNAME=eth0", "CNI_ARGS=K8S_POD_NAME=p;K8S_POD_UID=u", "CNI_PATH=" + bin,
	} {
		if !slices.Contains(strings.Split(env, "\n"), want) {
			t.Errorf("plugin environment lacks %s:\n%s", want, env)
		}
	}
	// The netns is gone: DEL runs without one, as the spec allows.
	if !slices.Contains(strings.Split(env, "\n"), "CNI_NETNS=") {
		t.Errorf("CNI_NETNS not empty:\n%s", env)
	}
	for _, f := range stdins {
		stdin := string(must(os.ReadFile(f)))
		if !strings.Contains(stdin, `"prevResult"`) || !strings.Contains(stdin, "10.1.0.5/24") || !strings.Contains(stdin, `"name":"net"`) {
			t.Errorf("plugin stdin lacks the cached result as prevResult: %s", stdin)
		}
	}
	// Nothing of the private libcni cache is left.
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("scratch directory not cleaned: %v", left)
	}
}

func TestReleaseFailures(t *testing.T) {
	bin := t.TempDir()
	writePlugin(t, bin, "fails", `echo '{"cniVersion":"1.0.0","code":11,"msg":"pool locked"}'; exit 1`)
	writePlugin(t, bin, "stderr", `echo oops >&2; exit 3`)
	writePlugin(t, bin, "hangs", `sleep 30`)
	// A child that keeps stdout open after the plugin is killed.
	writePlugin(t, bin, "forks", `sleep 30 & wait`)
	r, err := New(Options{BinDirs: []string{bin}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ plugin, want string }{
		{"fails", "pool locked"},
		{"stderr", "oops"},
		{"missing", "failed to find plugin"},
		{"hangs", "deadline exceeded"},
		{"forks", "deadline exceeded"},
	} {
		t.Run(tc.plugin, func(t *testing.T) {
			start := time.Now()
			err := r.Release(t.Context(), "f", cache(`{"cniVersion":"1.0.0","name":"net","type":"`+tc.plugin+`"}`, ""))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s despite the 300ms timeout", d)
			}
		})
	}
}

func TestNewChecksScratchDir(t *testing.T) {
	if _, err := New(Options{BinDirs: []string{"/opt/cni/bin"}, ScratchDir: "/does/not/exist"}); err == nil {
		t.Fatal("no error for a missing scratch directory")
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("no error without a plugin directory")
	}
}

func FuzzDecode(f *testing.F) {
	for _, rel := range []string{
		"thin-bridge/results/sec-net-default-2a9cc5e4f8b450e601bf2382e1b1e3d1f3c75dcc540ed467d27ac4be55130087-net1",
		"thick-issue-1488/results/cilium-0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce-eth0",
	} {
		f.Add(readFixture(f, rel))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Decode(data)
		if err != nil {
			if a != nil {
				t.Fatal("attachment with an error")
			}
			return
		}
		// Whatever decodes names nothing outside the scratch directory.
		for _, s := range []string{a.ContainerID, a.IfName, a.NetworkName} {
			if s == "" || strings.ContainsAny(s, "/\x00") || s == "." || s == ".." {
				t.Fatalf("unsafe name %q", s)
			}
		}
		n, err := a.network()
		if err != nil {
			if errors.Is(err, ErrNotCache) {
				t.Fatal("ErrNotCache after a successful decode")
			}
			return
		}
		if name := n.name(); name == "" || strings.ContainsAny(name, "/\x00") || name == ".." {
			t.Fatalf("unsafe config name %q", name)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLiveNetNSMounted checks the one case that passes a namespace: a
// namespace bind mount as `ip netns add` and the runtimes make. Root only,
// like the end-to-end test; it fails rather than skips without root.
func TestLiveNetNSMounted(t *testing.T) {
	name := addNetNS(t)
	path := "/var/run/netns/" + name
	if got := liveNetNS("", path); got != path {
		t.Fatalf("liveNetNS(%q) = %q for a mounted namespace", path, got)
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v\n%s", err, out)
	}
	if got := liveNetNS("", path); got != "" {
		t.Fatalf("liveNetNS(%q) = %q after the namespace was deleted", path, got)
	}
}

// TestReleaseObserved: each DEL that ran is reported with the types of its
// first plugin and IPAM and its outcome; one that could not run is not.
func TestReleaseObserved(t *testing.T) {
	bin := t.TempDir()
	writePlugin(t, bin, "ok", `exit 0`)
	writePlugin(t, bin, "fails", `echo '{"cniVersion":"1.0.0","code":11,"msg":"no"}'; exit 1`)
	var got []Observed
	r, err := New(Options{BinDirs: []string{bin}, Observe: func(o Observed) { got = append(got, o) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		config     string
		plugin     string
		ipam       string
		wantErr    bool
		wantReport bool
	}{
		{config: `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ok","ipam":{"type":"host-local"}},{"type":"fails"}]}`,
			plugin: "ok", ipam: "host-local", wantErr: true, wantReport: true},
		{config: `{"cniVersion":"1.0.0","name":"net","type":"ok","ipam":{"type":"whereabouts"}}`,
			plugin: "ok", ipam: "whereabouts", wantReport: true},
		{config: `{"cniVersion":"1.0.0","name":"net","plugins":[]}`}, // no DEL to run
	} {
		got = nil
		err := r.Release(t.Context(), "f", cache(tc.config, ""))
		if (err != nil) != tc.wantErr && tc.wantReport {
			t.Errorf("%s: error %v", tc.config, err)
		}
		if !tc.wantReport {
			if len(got) != 0 {
				t.Errorf("%s: reported %+v for a DEL that did not run", tc.config, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Plugin != tc.plugin || got[0].IPAM != tc.ipam || (got[0].Err != nil) != tc.wantErr {
			t.Errorf("%s: reported %+v, want plugin %s, ipam %s, error %v", tc.config, got, tc.plugin, tc.ipam, tc.wantErr)
		}
	}
}

// TestReleaseInRoot: with a root, each plugin is found inside it and runs
// chrooted into it, in its /; a plugin that works only there (as a
// dynamically linked one needs the host's libraries) fails without the
// root; an absolute symlink resolves inside the root and ".." never leaves
// it; a netns path is resolved inside the root too. Root only, like
// TestLiveNetNSMounted.
func TestReleaseInRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to chroot")
	}
	root := t.TempDir()
	bin := filepath.Join(root, "opt", "cni", "bin")
	for _, d := range []string{bin, filepath.Join(root, "etc"), filepath.Join(root, "out")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "sweep-test-root"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "rooted"), "./testdata/rootplugin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
	// As /opt/cni/bin often holds: an absolute symlink, resolved inside.
	if err := os.Symlink("/opt/cni/bin/rooted", filepath.Join(bin, "abs")); err != nil {
		t.Fatal(err)
	}
	// Plugins outside the root, named by ".." and by an absolute path.
	outside := t.TempDir()
	writePlugin(t, outside, "escape", "exit 0")
	if err := os.Symlink(strings.Repeat("../", 20)+outside[1:]+"/escape", filepath.Join(bin, "dotdot")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside+"/escape", filepath.Join(bin, "outside")); err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{BinDirs: []string{"/opt/cni/bin"}, Root: root, Timeout: 10 * time.Second, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	netns := `,"netns":"/proc/1/ns/net"`
	for _, plugin := range []string{"rooted", "abs"} {
		if err := r.Release(t.Context(), "f", cache(`{"cniVersion":"1.0.0","name":"net","type":"`+plugin+`"}`, netns)); err != nil {
			t.Fatalf("%s: %v", plugin, err)
		}
		rec := filepath.Join(root, "out", "DEL.json")
		var call map[string]string
		if err := json.Unmarshal(must(os.ReadFile(rec)), &call); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"cwd": "/", "CNI_COMMAND": "DEL", "CNI_NETNS": "", "CNI_PATH": "/opt/cni/bin",
			"CNI_CONTAINERID": "0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce"}
		if !maps.Equal(call, want) {
			t.Errorf("%s: called with %v, want %v", plugin, call, want)
		}
		_ = os.Remove(rec)
	}
	for _, plugin := range []string{"dotdot", "outside", "escape"} {
		err := r.Release(t.Context(), "f", cache(`{"cniVersion":"1.0.0","name":"net","type":"`+plugin+`"}`, ""))
		if err == nil || !strings.Contains(err.Error(), "failed to find plugin") {
			t.Errorf("%s: error %v, want the plugin not found inside the root", plugin, err)
		}
	}
	// Without the root, the same plugin runs in the daemon's / and fails.
	r, err = New(Options{BinDirs: []string{bin}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Release(t.Context(), "f", cache(`{"cniVersion":"1.0.0","name":"net","type":"rooted"}`, ""))
	if err == nil || !strings.Contains(err.Error(), "not in its root") {
		t.Fatalf("error %v without the root, want the plugin's own", err)
	}
}

// TestLiveNetNSInRoot: inside a root, a netns path resolves there, as the
// chrooted plugin will open it: the daemon's own live namespace of the same
// path, reached by the absolute symlink /var/run -> /run, is not it.
func TestLiveNetNSInRoot(t *testing.T) {
	name := addNetNS(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run", "netns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root, "var", "run")); err != nil {
		t.Fatal(err)
	}
	path := "/var/run/netns/" + name
	for _, tc := range []struct{ root, want string }{{"", path}, {"/", path}, {root, ""}} {
		if got := liveNetNS(tc.root, path); got != tc.want {
			t.Errorf("liveNetNS(%q, %q) = %q, want %q", tc.root, path, got, tc.want)
		}
	}
}

// TestOptionsRoot: a root must be a clean absolute path, and the plugin
// directories absolute paths inside it.
func TestOptionsRoot(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string // the invalid field; empty: valid
	}{
		{Options{BinDirs: []string{"/opt/cni/bin"}, Root: "/host"}, ""},
		{Options{BinDirs: []string{"opt/cni/bin"}}, ""},
		{Options{BinDirs: []string{"opt/cni/bin"}, Root: "/host"}, "BinDirs"},
		{Options{BinDirs: []string{"/opt/cni/bin"}, Root: "host"}, "Root"},
		{Options{BinDirs: []string{"/opt/cni/bin"}, Root: "/host/../etc"}, "Root"},
	} {
		err := tc.opts.Validate()
		var fe *field.Error
		if got := ""; errors.As(err, &fe) {
			got = fe.Field
			if got != tc.want {
				t.Errorf("%+v: field %s, want %q", tc.opts, got, tc.want)
			}
		} else if err != nil || tc.want != "" {
			t.Errorf("%+v: error %v, want field %q", tc.opts, err, tc.want)
		}
	}
}

// addNetNS creates a network namespace with ip netns add, mounted under
// /var/run/netns as the runtimes mount theirs, and deletes it when the test
// ends. Root only; it fails rather than skips without root.
func addNetNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to create a network namespace")
	}
	name := fmt.Sprintf("sweep-unit-%d", time.Now().UnixNano())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}
