package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework"
)

// envInNetNS marks the test binary that RunInNetNS re-executed inside the
// new network namespace.
const envInNetNS = "SWEEP_TEST_NETNS"

// NodeIP is the address of the test node (StartNode) in its network
// namespace, on the loopback device: pods reach the API server there, and the
// kubelet registers it as the node's address. Nothing outside the namespace
// sees it.
const NodeIP = "10.240.0.1"

// RunInNetNS is a TestMain for packages that run a real node: it re-executes
// the test binary in a new network namespace (`unshare --net`), so that the
// control plane, containerd, the kubelet, the pods' bridge and every port they
// open live apart from the machine's own network and from other test
// packages; the namespace disappears with the last of its processes. In the
// namespace it brings up the loopback device with NodeIP on it, then runs the
// tests. It returns the exit code for os.Exit.
//
// unshare changes nothing but the network namespace: `ip netns exec` would
// also remount /sys, hiding the cgroup mounts from the kubelet.
func RunInNetNS(m *testing.M) int {
	if os.Getenv(envInNetNS) == "" {
		return framework.Reexec(envInNetNS, "a network namespace", "--net")
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", NodeIP + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "ip %v: %v\n%s", args, err, out)
			return 1
		}
	}
	return m.Run()
}

// inNetNS reports whether RunInNetNS made this process's network namespace.
func inNetNS() bool { return os.Getenv(envInNetNS) != "" }
