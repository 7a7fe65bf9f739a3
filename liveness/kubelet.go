package liveness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// DefaultProc is where processes are looked up.
const DefaultProc = "/proc"

// kubeletDefaultEndpoint is the kubelet's containerRuntimeEndpoint when
// neither its command line nor its configuration sets one.
const kubeletDefaultEndpoint = "unix:///run/containerd/containerd.sock"

// kubeletDefaultPort is the kubelet's serving port (port) when neither its
// command line nor its configuration sets one.
const kubeletDefaultPort = 10250

// kubeletWitness proves, on a bare node, that the runtime's socket is the
// one this machine's kubelet uses now: a kubelet process is running, and
// the runtime endpoint on its command line (or in its configuration) is
// the same socket file as --cri-endpoint. A runtime's name and version
// prove nothing here: a k3s or RKE2 kubelet's containerd listens at
// /run/k3s/containerd/containerd.sock while Docker, or a containerd left
// from before a migration, answers at the default socket; two containerds
// of the same version answer alike. Only the kubelet knows which is its.
//
// A kubelet's paths mean what they mean in its own mount namespace, so
// they are read through its root (/proc/PID/root): a kubelet in a
// container (kind, k3d, minikube) names a socket inside the container,
// whatever sweepd finds at that path outside. Every kubelet on the machine
// must use our socket: one that uses another runtime leaves open which of
// them runs the pods whose files sweepd reads.
//
// A process named kubelet is no proof that it is the node's: a
// kubelet.service left enabled after a move to k3s crash-loops beside the
// kubelet k3s runs inside itself, alive a second or two of every ten. Only
// a kubelet that holds its own serving port (a listening socket among its
// file descriptors) proves: two kubelets cannot both hold it in one
// network namespace, and one that cannot bind it does not serve the node.
// And where a process that runs a kubelet inside itself runs (k3s,
// MicroK8s's kubelite, hyperkube kubelet), nothing proves: its kubelet's
// runtime is on no command line sweepd can read.
type kubeletWitness struct {
	socket string // the CRI socket sweepd dials
	proc   string // DefaultProc but in tests

	mu    sync.Mutex
	pid   int    // the kubelet proven
	start string // its start time, so that a reused PID is not it
	check recheck
}

// Name implements Witness.
func (w *kubeletWitness) Name() string { return "kubelet-process" }

// Prove implements Witness.
func (w *kubeletWitness) Prove(context.Context, Evidence) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pid, w.check = 0, recheck{}
	ours, err := statID(w.socket)
	if err != nil {
		return fmt.Errorf("container runtime socket: %w", err)
	}
	kubelets, embedders, err := findKubelets(w.proc)
	if err != nil {
		return fmt.Errorf("look for the kubelet: %w", err)
	}
	if len(embedders) > 0 {
		return unproven(ErrRuntimeUnproven, "%s runs a kubelet inside it, whose runtime no command line names: nothing on this machine "+
			"proves that %s is the runtime of this node's pods (a process named kubelet beside it may be left over); use --liveness=api",
			strings.Join(embedders, ", "), w.socket)
	}
	if len(kubelets) == 0 {
		return unproven(ErrRuntimeUnproven, "no kubelet process runs on this machine (none named kubelet in %s), so nothing proves that "+
			"%s is the runtime of this node's pods; where the kubelet runs inside another process (k3s), use --liveness=api", w.proc, w.socket)
	}
	// Every kubelet must use our socket: several that name different
	// runtimes leave open which one runs the pods whose files sweepd reads
	// (a kind or k3d node's kubelet beside the host's, say).
	var (
		proven *kubeletProcess
		others []string
	)
	for i, k := range kubelets {
		endpoint, port, id, err := k.socket(w.proc)
		switch {
		case err != nil && endpoint != "":
			others = append(others, fmt.Sprintf("pid %d uses %s, no file in its root (%v)", k.pid, endpoint, err))
		case err != nil:
			others = append(others, fmt.Sprintf("pid %d: %v", k.pid, err))
		case id != ours:
			others = append(others, fmt.Sprintf("pid %d uses %s", k.pid, endpoint))
		default:
			// Ours, but only a kubelet that serves is the node's.
			switch serving, err := holdsListener(w.proc, k, port); {
			case err != nil:
				others = append(others, fmt.Sprintf("pid %d uses %s, but whether it holds its serving port %d cannot be read: %v", k.pid, endpoint, port, err))
			case !serving:
				others = append(others, fmt.Sprintf("pid %d uses %s, but holds no listening socket on its serving port %d: "+
					"not the node's serving kubelet (one that crash-loops beside another, or one still starting)", k.pid, endpoint, port))
			case proven == nil:
				proven = &kubelets[i]
			}
		}
	}
	switch {
	case proven != nil && len(others) == 0:
		w.pid, w.start = proven.pid, proven.start
		w.check.reset(true)
		return nil
	case proven != nil:
		return unproven(ErrRuntimeUnproven, "kubelet pid %d uses the socket %s, but other kubelets on this machine use other runtimes (%s): "+
			"several kubelets prove nothing of which one runs this node's pods", proven.pid, w.socket, strings.Join(others, "; "))
	}
	return unproven(ErrRuntimeUnproven, "no kubelet on this machine uses the socket %s (%s): it is not the runtime of this node's pods "+
		"(set --cri-endpoint to the kubelet's --container-runtime-endpoint)", w.socket, strings.Join(others, "; "))
}

// Holds implements Witness: the kubelet proven still runs.
func (w *kubeletWitness) Holds() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.check.holds(func() bool {
		start, err := startTime(w.proc, w.pid)
		return err == nil && start == w.start
	})
}

// kubeletProcess is a process named kubelet.
type kubeletProcess struct {
	pid   int
	start string
	args  []string
}

// socket returns the runtime endpoint that k uses, its serving port, and
// the identity of its socket file (an error with the endpoint when there
// is none), all read as k sees them: through its own root (/proc/PID/root),
// every symlink resolved inside that root. A kubelet in another mount
// namespace (a container's, kind's) names paths of its own file system;
// read in sweepd's, the same path may be another runtime's socket, or left
// over.
func (k kubeletProcess) socket(proc string) (string, int, fileID, error) {
	root, err := openProcessRoot(proc, k.pid)
	if err != nil {
		return "", 0, fileID{}, err
	}
	defer root.close()
	// The root opened is k's only if the PID still is: a PID reused since
	// the kubelet was listed would lend another process's root.
	if start, err := startTime(proc, k.pid); err != nil || start != k.start {
		return "", 0, fileID{}, errors.New("exited while it was looked at")
	}
	settings, err := readKubeletSettings(k.args, root.readFile, root.glob)
	if err != nil {
		return "", 0, fileID{}, err
	}
	path, err := endpointPath(settings.endpoint)
	if err != nil {
		return "", 0, fileID{}, err
	}
	id, err := root.statID(path)
	return settings.endpoint, settings.port, id, err
}

// processRoot reads files inside another process's root directory, as
// that process would resolve their paths.
type processRoot struct{ fd int }

// maxKubeletConfig bounds the read of one kubelet configuration file.
const maxKubeletConfig = 1 << 20

// openProcessRoot opens /proc/PID/root. The kernel lets only a process
// that may ptrace-read PID open it: root with CAP_SYS_PTRACE, or all of
// the target's capabilities.
func openProcessRoot(proc string, pid int) (processRoot, error) {
	path := filepath.Join(proc, strconv.Itoa(pid), "root")
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return processRoot{}, fmt.Errorf("cannot read its root %s: %w (reading another process's root takes CAP_SYS_PTRACE, "+
			"which the systemd unit grants)", path, err)
	case err != nil:
		return processRoot{}, fmt.Errorf("its root: %w", err)
	}
	return processRoot{fd: fd}, nil
}

func (r processRoot) close() { _ = unix.Close(r.fd) }

// open opens path inside the root: an absolute symlink on the way resolves
// against the root too, and ".." never leaves it.
func (r processRoot) open(path string, flags int) (int, error) {
	return unix.Openat2(r.fd, path, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

func (r processRoot) readFile(path string) ([]byte, error) {
	fd, err := r.open(path, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKubeletConfig+1))
	if err == nil && len(data) > maxKubeletConfig {
		err = fmt.Errorf("%s: larger than %d bytes", path, maxKubeletConfig)
	}
	return data, err
}

// glob returns the names in pattern's directory that match its last
// element, as filepath.Glob does for a pattern with no meta characters
// before it (a kubelet's --config-dir/*.conf).
func (r processRoot) glob(pattern string) ([]string, error) {
	dir, match := filepath.Split(pattern)
	fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if ok, err := filepath.Match(match, n); err != nil {
			return nil, err
		} else if ok {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out, nil
}

// statID returns the identity of the file at path inside the root.
func (r processRoot) statID(path string) (fileID, error) {
	fd, err := r.open(path, unix.O_PATH)
	if err != nil {
		return fileID{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino, ctime: syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec}}, nil
}

// findKubelets lists the processes whose command name is kubelet, and
// describes those that run a kubelet inside them (embedders).
func findKubelets(proc string) (kubelets []kubeletProcess, embedders []string, err error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			continue // gone meanwhile
		}
		comm := strings.TrimSpace(string(data))
		if comm != "kubelet" && !mayEmbedKubelet(comm) {
			continue
		}
		if !runsAsRoot(dir) {
			// Any user can name a process kubelet (or k3s); a kubelet
			// runs as root. An unprivileged one neither proves nor
			// refuses.
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(cmdline) == 0 {
			// An empty command line is a process that has exited (a
			// zombie) or has not yet set up its arguments: no kubelet
			// that runs now, and no default endpoint to read from it.
			continue
		}
		start, err := startTime(proc, pid)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if comm != "kubelet" {
			if embedsKubelet(comm, args) {
				embedders = append(embedders, fmt.Sprintf("pid %d (%s)", pid, strings.Join(args[:min(len(args), 2)], " ")))
			}
			continue
		}
		kubelets = append(kubelets, kubeletProcess{pid: pid, start: start, args: args})
	}
	return kubelets, embedders, nil
}

// mayEmbedKubelet reports whether a process of this command name may run a
// kubelet inside itself: k3s (whose server and agent are k3s-server and
// k3s-agent to the kernel), MicroK8s's kubelite, hyperkube.
func mayEmbedKubelet(comm string) bool {
	switch comm {
	case "k3s", "k3s-server", "k3s-agent", "kubelite", "hyperkube":
		return true
	}
	return false
}

// embedsKubelet reports whether the process comm with this command line
// may run a kubelet: kubelite always; k3s and hyperkube unless their first
// argument names one of their tools that runs none (k3s kubectl, hyperkube
// kube-apiserver). Any other first argument counts as a kubelet's: a
// subcommand not known here must not pass for none.
func embedsKubelet(comm string, args []string) bool {
	sub := ""
	if len(args) > 1 {
		sub = args[1]
	}
	switch comm {
	case "k3s":
		switch sub {
		case "kubectl", "crictl", "ctr", "check-config", "token", "etcd-snapshot", "secrets-encrypt", "certificate", "completion", "help", "--help", "-h", "--version", "-v":
			return false
		}
	case "hyperkube":
		switch sub {
		case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl", "cloud-controller-manager", "--help", "--version":
			return false
		}
	}
	return true
}

// holdsListener reports whether the kubelet k holds a listening TCP socket
// on port: one whose inode its network namespace lists in LISTEN state
// (/proc/PID/net/tcp and tcp6) and that is among its file descriptors.
// Reading another process's descriptors takes what reading its root does.
func holdsListener(proc string, k kubeletProcess, port int) (bool, error) {
	dir := filepath.Join(proc, strconv.Itoa(k.pid))
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join(dir, "net", table))
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return false, err
		}
		for _, inode := range listeners(data, port) {
			inodes[inode] = true
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			// The descriptors are k's only if the PID still is.
			start, err := startTime(proc, k.pid)
			return err == nil && start == k.start, nil
		}
	}
	return false, nil
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listeners returns the inodes of the sockets in a /proc/net/tcp or tcp6
// table that listen on port.
func listeners(table []byte, port int) []string {
	var inodes []string
	for i, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if i == 0 || len(f) < 10 || f[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || int(p) != port {
			continue
		}
		if f[9] != "0" {
			inodes = append(inodes, f[9])
		}
	}
	return inodes
}

// runsAsRoot reports whether the process whose /proc directory is dir runs
// with real and effective user ID 0, as this process sees user IDs.
func runsAsRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			return len(f) >= 2 && f[0] == "0" && f[1] == "0"
		}
	}
	return false
}

// startTime reads a process's start time (field 22 of /proc/PID/stat), in
// clock ticks since boot.
func startTime(proc string, pid int) (string, error) {
	data, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", err
	}
	// The command name, field 2, is in parentheses and may hold anything.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", fmt.Errorf("pid %d: malformed stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("pid %d: malformed stat", pid)
	}
	return f[19], nil // fields 3.. follow the name; 22 is the 20th
}

// kubeletConfig is the part of a KubeletConfiguration that names the
// runtime and the serving port.
type kubeletConfig struct {
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	Port                     int32  `json:"port"`
}

// kubeletSettings are what sweepd reads of a kubelet's settings.
type kubeletSettings struct {
	endpoint string
	port     int
}

// kubeletEndpoint returns the runtime endpoint that a kubelet with these
// arguments uses (see readKubeletSettings).
func kubeletEndpoint(args []string, readFile func(string) ([]byte, error), glob func(string) ([]string, error)) (string, error) {
	s, err := readKubeletSettings(args, readFile, glob)
	return s.endpoint, err
}

// readKubeletSettings returns the runtime endpoint and the serving port that a
// kubelet with these arguments uses, each by the kubelet's precedence: its
// command line (--container-runtime-endpoint, --port), else the last of its
// --config-dir drop-ins (*.conf, in lexical order) that sets it, else its
// --config file, else the default.
func readKubeletSettings(args []string, readFile func(string) ([]byte, error), glob func(string) ([]string, error)) (kubeletSettings, error) {
	var flagEndpoint, flagPort, config, configDir string
	for i := 1; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		var target *string
		switch name {
		case "--container-runtime-endpoint":
			target = &flagEndpoint
		case "--port":
			target = &flagPort
		case "--config":
			target = &config
		case "--config-dir":
			target = &configDir
		default:
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		*target = value
	}
	endpoint, port := kubeletDefaultEndpoint, kubeletDefaultPort
	read := func(path string) error {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("kubelet configuration %q is not an absolute path", path)
		}
		data, err := readFile(path)
		if err != nil {
			return fmt.Errorf("kubelet configuration: %w", err)
		}
		var c kubeletConfig
		if err := yaml.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("kubelet configuration %s: %w", path, err)
		}
		if c.ContainerRuntimeEndpoint != "" {
			endpoint = c.ContainerRuntimeEndpoint
		}
		if c.Port != 0 {
			port = int(c.Port)
		}
		return nil
	}
	// The flags beat the files; without both flags the files are read.
	if flagEndpoint == "" || flagPort == "" {
		if config != "" {
			if err := read(config); err != nil {
				return kubeletSettings{}, err
			}
		}
		if configDir != "" {
			files, err := glob(filepath.Join(configDir, "*.conf"))
			if err != nil {
				return kubeletSettings{}, fmt.Errorf("kubelet configuration directory: %w", err)
			}
			slices.Sort(files)
			for _, f := range files {
				if err := read(f); err != nil {
					return kubeletSettings{}, err
				}
			}
		}
	}
	if flagEndpoint != "" {
		endpoint = flagEndpoint
	}
	if flagPort != "" {
		p, err := strconv.ParseUint(flagPort, 10, 16)
		if err != nil || p == 0 {
			return kubeletSettings{}, fmt.Errorf("kubelet --port %q is no port", flagPort)
		}
		port = int(p)
	}
	if port <= 0 || port > 65535 {
		return kubeletSettings{}, fmt.Errorf("kubelet configuration: port %d is no port", port)
	}
	return kubeletSettings{endpoint: endpoint, port: port}, nil
}

// endpointPath returns the socket path of a kubelet's runtime endpoint:
// unix:///path, or a bare absolute path as older kubelets accepted.
func endpointPath(endpoint string) (string, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("runtime endpoint %q is not a unix socket path", endpoint)
	}
	return path, nil
}
