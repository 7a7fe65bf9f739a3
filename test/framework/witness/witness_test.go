package witness_test

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/test/framework/witness"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: mount namespaces and bind mounts")
	}
}

// hostnameRoot returns the root field (the 4th) of the last mountinfo line
// whose mount point is /etc/hostname: the topmost mount there.
func hostnameRoot(mountinfo string) string {
	root := ""
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 && f[4] == "/etc/hostname" {
			root = f[3]
		}
	}
	return root
}

// TestInSandbox checks what sweepd reads: the command's own process (the
// PID the test started) sees /etc/hostname mounted from the sandbox's
// directory, and the test's mount namespace does not.
func TestInSandbox(t *testing.T) {
	needRoot(t)
	id := strings.Repeat("0123456789abcdef", 4)
	cmd := exec.Command("sh", "-c", `echo $$; cat /proc/self/mountinfo`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	dir := witness.InSandbox(t, cmd, id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	first, mountinfo, _ := strings.Cut(out.String(), "\n")
	if first != strconv.Itoa(pid) {
		t.Errorf("the command ran as PID %s, want the started %d", first, pid)
	}
	root := hostnameRoot(mountinfo)
	if want := filepath.Join(witness.SandboxesDir, id, "hostname"); !strings.HasSuffix(root, "/"+want) {
		t.Errorf("/etc/hostname's root = %q, want one ending in /%s\n%s", root, want, mountinfo)
	}
	if !strings.HasPrefix(dir, os.TempDir()) || !strings.HasSuffix(dir, id) {
		t.Errorf("sandbox directory %q", dir)
	}
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(host), id) {
		t.Errorf("the sandbox's mount leaked into the test's namespace:\n%s", host)
	}
}

// TestStartKubelet checks the comm and the cmdline that sweepd reads, and
// that Kill takes the process out of /proc.
func TestStartKubelet(t *testing.T) {
	const endpoint = "unix:///run/fake/cri.sock"
	k := witness.StartKubelet(t, "--container-runtime-endpoint="+endpoint, "--v=2")
	proc := "/proc/" + strconv.Itoa(k.Pid())
	comm, err := os.ReadFile(proc + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	if string(comm) != "kubelet\n" {
		t.Errorf("comm = %q, want kubelet", comm)
	}
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	n := len(args)
	if n < 3 || args[n-3] != "--container-runtime-endpoint="+endpoint || args[n-2] != "--v=2" || !strings.HasPrefix(args[n-1], "--port=") {
		t.Fatalf("cmdline = %q", args)
	}
	// Its serving port: listening, held by the kubelet after the test
	// closed its own copy.
	c, err := net.Dial("tcp", "127.0.0.1:"+strings.TrimPrefix(args[n-1], "--port="))
	if err != nil {
		t.Errorf("its serving port: %v", err)
	} else {
		_ = c.Close()
	}
	k.Kill()
	if _, err := os.Stat(proc); !os.IsNotExist(err) {
		t.Errorf("%s after Kill: %v", proc, err)
	}
	k.Kill()
}

// TestStartCrashLoopingKubelet and TestStartProcess: no serving port; the
// name asked for.
func TestStartCrashLoopingKubelet(t *testing.T) {
	for comm, k := range map[string]*witness.Kubelet{
		"kubelet": witness.StartCrashLoopingKubelet(t, "--v=2"),
		"k3s":     witness.StartProcess(t, "k3s", "server"),
	} {
		proc := "/proc/" + strconv.Itoa(k.Pid())
		if got, err := os.ReadFile(proc + "/comm"); err != nil || string(got) != comm+"\n" {
			t.Errorf("comm = %q, %v; want %s", got, err, comm)
		}
		cmdline, err := os.ReadFile(proc + "/cmdline")
		if err != nil || strings.Contains(string(cmdline), "--port") {
			t.Errorf("cmdline = %q, %v; want no --port", cmdline, err)
		}
		k.Kill()
	}
}

// TestStartContainedKubelet: the kubelet's own root shows the bound
// directory's content at the path, the test's does not, and its PID is
// the kubelet's.
func TestStartContainedKubelet(t *testing.T) {
	outer, inner := t.TempDir(), t.TempDir()
	for dir, content := range map[string]string{outer: "outer", inner: "inner"} {
		if err := os.WriteFile(filepath.Join(dir, "cri.sock"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := witness.StartContainedKubelet(t, map[string]string{outer: inner}, "--container-runtime-endpoint=unix://"+outer+"/cri.sock")
	proc := "/proc/" + strconv.Itoa(k.Pid())
	if comm, err := os.ReadFile(proc + "/comm"); err != nil || string(comm) != "kubelet\n" {
		t.Fatalf("comm = %q, %v; want kubelet", comm, err)
	}
	if got, err := os.ReadFile(proc + "/root" + outer + "/cri.sock"); err != nil || string(got) != "inner" {
		t.Errorf("in the kubelet's root: %q, %v; want the bound directory's", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(outer, "cri.sock")); err != nil || string(got) != "outer" {
		t.Errorf("in the test's: %q, %v; want its own", got, err)
	}
	k.Kill()
}

// TestKubeletConfig checks that the file says what a kubelet would read.
func TestKubeletConfig(t *testing.T) {
	const endpoint = "unix:///run/containerd/containerd.sock"
	data, err := os.ReadFile(witness.KubeletConfig(t, endpoint))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Kind                     string `json:"kind"`
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != "KubeletConfiguration" || cfg.ContainerRuntimeEndpoint != endpoint {
		t.Errorf("config %+v from\n%s", cfg, data)
	}
}
