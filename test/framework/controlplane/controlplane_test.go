package controlplane_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// TestVersionsMatchToolsModules keeps the harness constants and the tools
// modules (which name the cache directories) in step.
func TestVersionsMatchToolsModules(t *testing.T) {
	for _, tc := range []struct{ mod, module, want string }{
		{"../../../hack/tools/kube/go.mod", "k8s.io/kubernetes", controlplane.KubeVersion},
		{"../../../hack/tools/etcd/go.mod", "go.etcd.io/etcd/server/v3", controlplane.EtcdVersion},
		{"../../../hack/tools/helm/go.mod", "helm.sh/helm/v3", controlplane.HelmVersion},
		{"../../../hack/tools/helm-docs/go.mod", "github.com/norwoodj/helm-docs", controlplane.HelmDocsVersion},
		{"../../../hack/tools/cni/go.mod", "github.com/containernetworking/plugins", controlplane.CNIPluginsVersion},
		{"../../../hack/tools/whereabouts/go.mod", "github.com/k8snetworkplumbingwg/whereabouts", controlplane.WhereaboutsVersion},
		{"../../../hack/tools/multus/go.mod", "gopkg.in/k8snetworkplumbingwg/multus-cni.v4", controlplane.MultusVersion},
		{"../../../hack/tools/containerd/go.mod", "github.com/containerd/containerd/v2", controlplane.ContainerdVersion},
		{"../../../hack/tools/crio/go.mod", "github.com/cri-o/cri-o", controlplane.CRIOVersion},
		{"../../../hack/tools/registry/go.mod", "github.com/distribution/distribution/v3", controlplane.RegistryVersion},
		{"../../../hack/tools/cosign/go.mod", "github.com/sigstore/cosign/v2", controlplane.CosignVersion},
		{"../../../hack/tools/cyclonedx-gomod/go.mod", "github.com/CycloneDX/cyclonedx-gomod", controlplane.CycloneDXGomodVersion},
	} {
		data, err := os.ReadFile(filepath.FromSlash(tc.mod))
		if err != nil {
			t.Fatal(err)
		}
		// A module that provides only tools is "// indirect" for go mod tidy.
		if req := tc.module + " " + tc.want; !strings.Contains(string(data), req+"\n") && !strings.Contains(string(data), req+" // indirect\n") {
			t.Errorf("%s does not require %s %s", tc.mod, tc.module, tc.want)
		}
	}
}
