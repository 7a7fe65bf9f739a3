package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// crioConfig is CRI-O's configuration: everything it keeps under $DIR, the
// cgroupfs driver of the node's kubelet, Debian's conmon, and Debian's runc
// through runcwrap (this machine refuses a lower oom_score_adj). The rest is
// CRI-O's defaults, as OpenShift runs them: among them drop_infra_ctr, so a
// pod that does not share its PID namespace has no pause process.
const crioConfig = `[crio]
root = "$DIR/storage"
runroot = "$DIR/run-storage"
storage_driver = "overlay"
log_dir = "$DIR/pod-logs"
version_file = "$DIR/version"
version_file_persist = "$DIR/version-persist"
clean_shutdown_file = "$DIR/clean.shutdown"

[crio.api]
listen = "$SOCKET"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
namespaces_dir = "$DIR/ns"
pinns_path = "$PINNS"
container_exits_dir = "$DIR/exits"
container_attach_socket_dir = "$DIR/attach"
hooks_dir = []
irqbalance_config_file = ""
irqbalance_config_restore_file = ""

[crio.runtime.runtimes.runc]
runtime_path = "$RUNC"
runtime_root = "$DIR/runc"
monitor_path = "$CONMON"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$PAUSE"
signature_policy = "$DIR/policy.json"

[crio.network]
network_dir = "$CNICONF"
plugin_dirs = ["$CNIBIN"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
`

// crioRegistries are CRI-O's registries, in registries.conf's terms: each
// registry a test's images name (sweep.local for ImportImage's,
// MirrorRegistry's) served by a registry of the test's own over plain HTTP.
type crioRegistries map[string]string

func (r crioRegistries) conf() string {
	var b strings.Builder
	b.WriteString("unqualified-search-registries = []\n")
	for _, prefix := range slices.Sorted(maps.Keys(r)) {
		fmt.Fprintf(&b, "\n[[registry]]\nprefix = %q\nlocation = %q\ninsecure = true\n", prefix, r[prefix])
	}
	return b.String()
}

// newCRIO writes CRI-O's configuration, with everything it keeps under
// n.Dir/crio, and returns its process, not started. ImportImage pushes
// images into reg, a registry of the node's own: CRI-O imports no archive,
// it pulls.
func (n *Node) newCRIO(t testing.TB) (*process, error) {
	path, err := Binary("crio")
	if err != nil {
		return nil, err
	}
	pinns, err := Binary("pinns")
	if err != nil {
		return nil, err
	}
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		return nil, fmt.Errorf("conmon (Debian package conmon): %w", err)
	}
	if _, err := os.Stat(runcPath); err != nil {
		return nil, fmt.Errorf("runc (Debian package runc): %w", err)
	}
	binDir := n.cniBinDir
	if binDir == "" {
		if binDir, err = CNIBinDir(); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(n.Dir, "crio")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	config := strings.NewReplacer(
		"$DIR", dir, "$SOCKET", n.Socket, "$PINNS", pinns, "$CONMON", conmon,
		"$RUNC", testbin.BuildStatic(t, "./test/framework/controlplane/runcwrap"),
		"$PAUSE", PauseImage, "$CNIBIN", binDir, "$CNICONF", n.CNIConfDir,
	).Replace(crioConfig)
	configPath := filepath.Join(n.Dir, "crio.conf")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(`{"default": [{"type": "insecureAcceptAnything"}]}`), 0o644); err != nil {
		return nil, err
	}
	// The machine's storage.conf, if any, is not the node's; crio.conf
	// says the same.
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n",
		filepath.Join(dir, "storage"), filepath.Join(dir, "run-storage"))
	if err := os.WriteFile(filepath.Join(dir, "storage.conf"), []byte(storage), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "registries.conf.d"), 0o755); err != nil {
		return nil, err
	}
	n.crioRegistries = crioRegistries{}
	if err := n.writeRegistries(); err != nil {
		return nil, err
	}
	return &process{
		name: "crio", path: path, logPath: filepath.Join(n.Dir, "crio.log"),
		// No drop-in directory: /etc/crio/crio.conf.d is the machine's.
		// Nor registries.conf.d: the machine's /etc/containers is not the
		// node's.
		args: []string{"--config", configPath, "--config-dir", "", "--log-level", "info",
			"--registries-conf", n.registriesConf(), "--registries-conf-dir", filepath.Join(dir, "registries.conf.d")},
		env: append(os.Environ(),
			"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf")),
	}, nil
}

// runcPath is Debian's runc, which runcwrap runs.
const runcPath = "/usr/sbin/runc"

func (n *Node) registriesConf() string { return filepath.Join(n.Dir, "crio", "registries.conf") }

// writeRegistries writes registries.conf; a running CRI-O reads it again on
// SIGHUP.
func (n *Node) writeRegistries() error {
	return os.WriteFile(n.registriesConf(), []byte(n.crioRegistries.conf()), 0o644)
}

// crioRegistry makes CRI-O pull the images of prefix (a registry host) from
// location (a host:port speaking plain HTTP, with a path), and has the
// running CRI-O read its registries again.
func (n *Node) crioRegistry(t testing.TB, prefix, location string) {
	t.Helper()
	if n.crioRegistries[prefix] == location {
		return
	}
	n.crioRegistries[prefix] = location
	if err := n.writeRegistries(); err != nil {
		t.Fatal(err)
	}
	const applied = "Applied new registry configuration"
	before := n.runtime.logCount(applied)
	if err := n.runtime.signal(syscall.SIGHUP); err != nil {
		t.Fatalf("reload CRI-O's registries: %v", err)
	}
	// The reload is asynchronous: wait until CRI-O logged it.
	deadline := time.Now().Add(readyTimeout)
	for n.runtime.logCount(applied) == before {
		if time.Now().After(deadline) {
			t.Fatalf("CRI-O did not reload its registries within %s:\n%s", readyTimeout, n.runtime.logTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// importCRIO pushes img into the node's registry and has CRI-O pull it.
func (n *Node) importCRIO(t testing.TB, img Image) {
	t.Helper()
	ref, err := name.ParseReference(img.Ref)
	if err != nil {
		t.Fatal(err)
	}
	host := ref.Context().RegistryStr()
	n.crioRegistry(t, host, n.registry.Host+"/"+host)
	pushed, err := name.ParseReference(n.registry.Host+"/"+host+"/"+ref.Context().RepositoryStr()+":"+ref.Identifier(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	built, err := img.Build(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(pushed, built); err != nil {
		t.Fatalf("push %s: %v", pushed, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := n.criConn(t)
	if _, err := runtimeapi.NewImageServiceClient(conn).PullImage(ctx, &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: img.Ref},
	}); err != nil {
		t.Fatalf("CRI-O: pull %s (pushed to %s): %v\n%s", img.Ref, pushed, err, n.runtime.logTail(20))
	}
}

// dialCRI connects to the CRI at socket.
func dialCRI(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// criConn connects to the node's runtime through its CRI, for the test's
// lifetime.
func (n *Node) criConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := dialCRI(n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// criVersion asks the runtime at socket for its version: it answers once it
// serves the CRI.
func criVersion(ctx context.Context, socket string) error {
	conn, err := dialCRI(socket)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// crioSandboxes lists CRI-O's pod sandboxes through its CRI, with each
// one's network namespace from its verbose status.
func (n *Node) crioSandboxes(t testing.TB) []Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := n.criConn(t)
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("CRI-O: ListPodSandbox: %v", err)
	}
	var out []Sandbox
	for _, sb := range list.GetItems() {
		m := sb.GetMetadata()
		s := Sandbox{ID: sb.GetId(), PodUID: m.GetUid(), PodName: m.GetName(), PodNS: m.GetNamespace(),
			Running: sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY}
		st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.GetId(), Verbose: true})
		if err != nil {
			continue // removed since the listing
		}
		var info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string }
				}
			}
		}
		if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil {
			t.Fatalf("CRI-O: sandbox %s's verbose status: %v", sb.GetId(), err)
		}
		for _, ns := range info.RuntimeSpec.Linux.Namespaces {
			if ns.Type == "network" {
				s.NetNS = ns.Path
			}
		}
		out = append(out, s)
	}
	return out
}

// ImageStatus returns the runtime's record of the image ref, through its
// CRI, failing the test when it has none.
func (n *Node) ImageStatus(t testing.TB, ref string) *runtimeapi.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := n.criConn(t)
	st, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("ImageStatus %s: %v", ref, err)
	}
	if st.GetImage() == nil {
		t.Fatalf("the runtime has no image %s", ref)
	}
	return st.GetImage()
}

// crioContainerPID returns the PID of CRI-O's running container id.
func (n *Node) crioContainerPID(t testing.TB, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := n.criConn(t)
	st, err := runtimeapi.NewRuntimeServiceClient(conn).ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("CRI-O: ContainerStatus %s: %v", id, err)
	}
	if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("CRI-O: container %s is %s", id, st.GetStatus().GetState())
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("CRI-O: container %s's verbose status has no PID (%v): %s", id, err, st.GetInfo()["info"])
	}
	return info.Pid
}

// teardownCRIO stops and removes every pod sandbox through CRI-O, stops it,
// and kills what outlives it: the containers' processes (runc's, under the
// node's runc root) and their conmons.
func (n *Node) teardownCRIO() {
	if !n.runtime.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if conn, err := dialCRI(n.Socket); err == nil {
			rt := runtimeapi.NewRuntimeServiceClient(conn)
			if list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
				for _, sb := range list.GetItems() {
					// Errors are for sandboxes that went meanwhile;
					// runc's kill below covers the rest.
					_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()})
					_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()})
				}
			}
			_ = conn.Close()
		}
		cancel()
		n.runtime.stop(syscall.SIGTERM, 10*time.Second)
	}
	root := filepath.Join(n.Dir, "crio", "runc")
	if out, err := exec.Command(runcPath, "--root", root, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runcPath, "--root", root, "delete", "--force", id).Run()
		}
	}
	killProcesses("conmon", filepath.Join(n.Dir, "crio")+"/")
}
