// Package node holds the end-to-end tests on a real node: containerd and
// runc from the machine's packages, the kubelet, kube-scheduler and the
// control plane built by hack/build-tools.sh, all in a network namespace the
// tests make (controlplane.RunInNetNS).
package node

import (
	"os"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunInNetNS(m))
}
