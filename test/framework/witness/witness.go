// Package witness makes the local proofs that sweepd takes for its runtime
// view belonging to this node, so that tests can give each or withhold it:
// a process inside a pod sandbox (InSandbox: its /etc/hostname is a bind
// mount of the sandbox's hostname file, as containerd makes it) and a
// kubelet process that names the runtime's socket (StartKubelet). The third
// proof, a Node Lease that is being renewed, is controlplane.RegisterNode's.
// InSandbox needs root, to mount.
package witness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
)

// SandboxesDir is where containerd's CRI plugin keeps its pod sandboxes'
// files, each in a directory named by the sandbox's ID (64 hex digits):
// hostname, hosts and resolv.conf, which it bind-mounts into the sandbox's
// containers at /etc. A container's /proc/self/mountinfo names that path as
// its /etc/hostname mount's root; InSandbox makes it under a test's temporary
// directory.
const SandboxesDir = "var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes"

// sandboxFiles are the files containerd mounts from a sandbox's directory at
// /etc in its containers.
var sandboxFiles = []string{"hostname", "hosts", "resolv.conf"}

// InSandbox makes cmd, not yet started, run as a container of the pod sandbox
// sandboxID does: in a mount namespace of its own where /etc/hostname,
// /etc/hosts and /etc/resolv.conf are bind mounts of files in
// <temp>/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/<sandboxID>/
// (with this machine's contents, so that nothing else changes for the
// process). It returns that directory. cmd keeps its process: unshare
// (without --fork) and sh exec into the command, so its PID is the one the
// test signals and waits on. It only changes cmd.Path and cmd.Args; set the
// rest before or after.
//
// The new mount namespace is a slave of the test's: mounts made later on the
// host (a network namespace's nsfs file, say) propagate into it where the
// host's mounts are shared, and the sandbox's bind mounts never leak out. The
// process still shares every other namespace (network, PID) with the test.
// /etc/hostname may be a mount already (in a container), in which case the
// sandbox's is mounted on top: its line comes later in mountinfo.
func InSandbox(t testing.TB, cmd *exec.Cmd, sandboxID string) string {
	t.Helper()
	if cmd.Process != nil {
		t.Fatal("InSandbox: command already started")
	}
	if cmd.Err != nil {
		return "" // Start reports it
	}
	dir := filepath.Join(t.TempDir(), SandboxesDir, sandboxID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, name := range sandboxFiles {
		target := filepath.Join("/etc", name)
		fi, err := os.Lstat(target)
		if err != nil || !fi.Mode().IsRegular() {
			// A bind mount on a symlink lands on its target, not at
			// /etc; a missing file cannot be mounted on.
			if name == "hostname" {
				t.Fatalf("InSandbox: %s must be a regular file to mount on: %v", target, err)
			}
			continue
		}
		data := []byte(hostname + "\n")
		if name != "hostname" {
			if data, err = os.ReadFile(target); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	unshare, sh, mount := lookPath(t, "unshare"), lookPath(t, "sh"), lookPath(t, "mount")
	script := `set -e; m=$1; shift; for f in`
	for _, f := range files {
		script += " " + f
	}
	script += `; do "$m" --bind "$0/$f" "/etc/$f"; done; exec "$@"`
	args := []string{"unshare", "--mount", "--propagation", "slave", "--", sh, "-c", script, dir, mount, cmd.Path}
	cmd.Path, cmd.Args = unshare, append(args, cmd.Args[1:]...)
	return dir
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("InSandbox: %v", err)
	}
	return path
}

// Kubelet is a running fake kubelet: a process whose comm (/proc/PID/comm)
// is "kubelet", whose command line carries the test's kubelet flags, and
// which holds a listening socket on its serving port (--port, on its
// command line), as the node's serving kubelet does, and does nothing else.
type Kubelet struct {
	// Cmd is the process, started.
	Cmd  *exec.Cmd
	done chan struct{}
}

// StartKubelet starts a fake kubelet with args after its name on its command
// line, for sweepd's proof that a kubelet on this node uses the runtime it
// asks: for example "--container-runtime-endpoint="+endpoint, or
// "--container-runtime-endpoint", endpoint, or "--config="+KubeletConfig(t,
// endpoint), or none for the kubelet's default endpoint. The process is a
// copy of sh named kubelet (the kernel names a process after the file it
// executes), blocked reading a pipe from the test: its command line is
// <temp>/kubelet -c <script> kubelet ARGS... --port=PORT, it holds a
// listening socket on 127.0.0.1:PORT (a port of its own), and it ends with
// the test process, or Kill, which the test's cleanup calls.
func StartKubelet(t testing.TB, args ...string) *Kubelet {
	t.Helper()
	return startProcess(t, "kubelet", true, nil, args)
}

// StartCrashLoopingKubelet starts a fake kubelet that holds no listening
// socket on its serving port: a kubelet that cannot bind it (another holds
// it) and crash-loops, as a kubelet.service left enabled beside k3s does,
// caught while it is alive.
func StartCrashLoopingKubelet(t testing.TB, args ...string) *Kubelet {
	t.Helper()
	return startProcess(t, "kubelet", false, nil, args)
}

// StartProcess starts a process named comm (k3s, kubelite) with args after
// its name, as StartKubelet does but without a port: a process that runs
// a kubelet inside itself.
func StartProcess(t testing.TB, comm string, args ...string) *Kubelet {
	t.Helper()
	return startProcess(t, comm, false, nil, args)
}

// StartContainedKubelet starts a fake kubelet as StartKubelet does, but in
// a mount namespace of its own, as a kubelet in a container runs (kind, k3d,
// minikube): in it, each directory binds names (a key) shows the content of
// another (its value), so that a path on its command line means another
// file to it than to the test. Its mount namespace is a slave of the test's.
func StartContainedKubelet(t testing.TB, binds map[string]string, args ...string) *Kubelet {
	t.Helper()
	if len(binds) == 0 {
		t.Fatal("StartContainedKubelet: no binds")
	}
	return startProcess(t, "kubelet", true, binds, args)
}

func startProcess(t testing.TB, comm string, serve bool, binds map[string]string, args []string) *Kubelet {
	t.Helper()
	framework.KubeletStarted(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), comm)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The serving socket: the test listens, the process inherits the
	// socket (as its descriptor 3) and the test closes its own copy.
	var listener *os.File
	if serve {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listener, err = l.(*net.TCPListener).File()
		_ = l.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Close()
		args = append(slices.Clone(args), fmt.Sprintf("--port=%d", l.Addr().(*net.TCPAddr).Port))
	}
	// read returns at end of input: when the test process dies, or Kill
	// closes the pipe.
	cmd := exec.Command(path, append([]string{"-c", "read -r _ || :", comm}, args...)...)
	if listener != nil {
		cmd.ExtraFiles = []*os.File{listener}
	}
	if len(binds) > 0 {
		// unshare and sh exec into the kubelet: its PID is cmd's.
		unshare, mount := lookPath(t, "unshare"), lookPath(t, "mount")
		script := `set -e; m=$1; shift; while [ "$1" != -- ]; do "$m" --bind "$1" "$2"; shift 2; done; shift; exec "$@"`
		wrap := []string{"unshare", "--mount", "--propagation", "slave", "--", sh, "-c", script, "sh", mount}
		for dst, src := range binds {
			wrap = append(wrap, src, dst)
		}
		wrap = append(wrap, "--", cmd.Path)
		cmd.Path, cmd.Args = unshare, append(wrap, cmd.Args[1:]...)
	}
	// The pipe stays open until Wait closes it.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fake %s: %v", comm, err)
	}
	k := &Kubelet{Cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(k.done)
	}()
	t.Cleanup(k.Kill)
	// Start returns once the kernel has committed to the new program, which
	// is before it has set up the program's arguments: until then cmdline
	// reads empty. A contained kubelet is unshare's and sh's process until
	// they exec into it.
	proc := fmt.Sprintf("/proc/%d/", cmd.Process.Pid)
	if !framework.Poll(10*time.Second, time.Millisecond, func() bool {
		got, err := os.ReadFile(proc + "comm")
		if err != nil || string(got) != comm+"\n" {
			return false
		}
		data, err := os.ReadFile(proc + "cmdline")
		return err == nil && len(data) > 0
	}) {
		t.Fatalf("fake %s: %s has no command line yet", comm, proc)
	}
	return k
}

// Pid is the fake kubelet's process ID.
func (k *Kubelet) Pid() int { return k.Cmd.Process.Pid }

// Kill kills the fake kubelet and waits until it has left /proc: a zombie
// keeps its comm, but its cmdline reads empty. It is safe to call more than
// once.
func (k *Kubelet) Kill() {
	_ = k.Cmd.Process.Kill()
	<-k.done
}

// KubeletConfig writes a KubeletConfiguration file, as a kubelet's --config
// names, whose containerRuntimeEndpoint is endpoint, and returns its path.
func KubeletConfig(t testing.TB, endpoint string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	data := fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: %s\n", strconv.Quote(endpoint))
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
