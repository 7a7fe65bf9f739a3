package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Versions of the binaries the harness runs. They must match the tools
// modules under hack/tools/ (a test checks), because hack/build-tools.sh names the
// cache directories after those modules' versions.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.6.16"
	HelmVersion = "v3.22.0"
	// HelmDocsVersion is github.com/norwoodj/helm-docs, which generates the
	// chart's README.
	HelmDocsVersion = "v1.14.2"
	// CNIPluginsVersion is github.com/containernetworking/plugins: bridge,
	// host-local and loopback for the CNI DEL tests.
	CNIPluginsVersion = "v1.10.0"
	// WhereaboutsVersion is github.com/k8snetworkplumbingwg/whereabouts, the
	// IPAM plugin whose reservations live in the API server.
	WhereaboutsVersion = "v0.9.2"
	// MultusVersion is gopkg.in/k8snetworkplumbingwg/multus-cni.v4, whose
	// thin plugin shows what multus's own DEL leaves behind, and whose thick
	// plugin (multus-daemon, multus-shim) runs on the test node.
	MultusVersion = "v4.3.0"
	// ContainerdVersion is github.com/containerd/containerd/v2, the test
	// node's second runtime (WithContainerd2); the first is Debian's.
	ContainerdVersion = "v2.4.2"
	// CRIOVersion is github.com/cri-o/cri-o, the test node's third runtime
	// (WithCRIO): OpenShift's.
	CRIOVersion = "v1.34.0"
	// RegistryVersion is github.com/distribution/distribution/v3, whose
	// registry the release tests publish into.
	RegistryVersion = "v3.1.2"
	// CosignVersion is github.com/sigstore/cosign/v2, which signs and
	// verifies a release's image and chart.
	CosignVersion = "v2.6.5"
	// CycloneDXGomodVersion is github.com/CycloneDX/cyclonedx-gomod, which
	// writes a release's SBOMs.
	CycloneDXGomodVersion = "v1.10.0"
)

// ToolsDir is where hack/build-tools.sh caches the binaries:
// $SWEEP_TOOLS_DIR, else $XDG_CACHE_HOME/sweep/tools, else ~/.cache/sweep/tools.
func ToolsDir() string {
	if d := os.Getenv("SWEEP_TOOLS_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "sweep", "tools")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "sweep", "tools")
}

// Tool returns Binary(name), failing the test when it is not built.
func Tool(t testing.TB, name string) string {
	t.Helper()
	path, err := Binary(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Binary returns the path of a cached tool binary: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kubectl, helm, helm-docs,
// a CNI plugin (bridge, host-local, loopback, whereabouts, multus,
// multus-daemon, multus-shim), containerd v2's
// containerd, containerd-shim-runc-v2 and ctr (not Debian's, which are on
// PATH), CRI-O's crio and pinns, or the release pipeline's registry, cosign and cyclonedx-gomod. A missing binary is an error that says how to build it; tests
// fail on it rather than skip.
func Binary(name string) (string, error) {
	var dir string
	switch name {
	case "etcd":
		dir = "etcd-" + EtcdVersion
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "atomicwriter":
		dir = "kube-" + KubeVersion
	case "helm":
		dir = "helm-" + HelmVersion
	case "helm-docs":
		dir = "helm-docs-" + HelmDocsVersion
	case "bridge", "host-local", "loopback":
		dir = "cni-plugins-" + CNIPluginsVersion
	case "whereabouts":
		dir = "whereabouts-" + WhereaboutsVersion
	case "multus", "multus-daemon", "multus-shim":
		dir = "multus-" + MultusVersion
	case "containerd", "containerd-shim-runc-v2", "ctr":
		dir = "containerd-" + ContainerdVersion
	case "crio", "pinns":
		dir = "crio-" + CRIOVersion
	case "registry":
		dir = "registry-" + RegistryVersion
	case "cosign":
		dir = "cosign-" + CosignVersion
	case "cyclonedx-gomod":
		dir = "cyclonedx-gomod-" + CycloneDXGomodVersion
	default:
		return "", fmt.Errorf("unknown tool %q", name)
	}
	path := filepath.Join(ToolsDir(), dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not built (run `make kube`): %w", name, err)
	}
	return path, nil
}

// CNIBinDir returns the directory of the cached CNI plugins, a stand-in for
// a node's /opt/cni/bin, once every plugin in it is built.
func CNIBinDir() (string, error) {
	var dir string
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		path, err := Binary(p)
		if err != nil {
			return "", err
		}
		dir = filepath.Dir(path)
	}
	return dir, nil
}
