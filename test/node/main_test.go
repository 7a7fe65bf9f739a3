// Package node holds the end-to-end tests on a real node: containerd 1.6
// and runc from the machine's packages, containerd v2 and CRI-O (with
// Debian's conmon), the kubelet, kube-scheduler and the control plane built
// by hack/build-tools.sh, all in a network namespace the tests make
// (controlplane.RunInNetNS).
package node

import (
	"os"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunInNetNS(m))
}
