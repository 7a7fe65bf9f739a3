package controlplane

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// FakeRuntime is what RegisterNode's Nodes report as their container
// runtime: the name and version of the fake runtime (test/framework/fakecri), as
// a kubelet on it would.
const FakeRuntime = "fakecri://0.0.0"

// MachineBootID returns this machine's boot ID, which a kubelet here would
// report as its Node's status.nodeInfo.bootID.
func MachineBootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// RegisterNode creates the Node name, or updates it, reporting bootID and
// runtime as a kubelet does when it starts: where no kubelet runs, sweepd
// condemns nothing by a node's pods until such a Node exists. It also starts,
// unless it runs already, the node's fake kubelet, which renews the Node's
// Lease (kube-node-lease/name) every KubeletRenewInterval until StopKubelet or
// until the ControlPlane serving cs stops: sweepd trusts no Node whose Lease
// is not being renewed. The Lease exists, freshly renewed, when RegisterNode
// returns. cs must be a clientset of a ControlPlane of this package (by its
// API server's host).
func RegisterNode(ctx context.Context, cs kubernetes.Interface, name, bootID, runtime string) error {
	nodes := cs.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.NodeInfo.BootID, n.Status.NodeInfo.ContainerRuntimeVersion = bootID, runtime
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return startKubelet(ctx, cs, name)
}
