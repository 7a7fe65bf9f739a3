package liveness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// DefaultProc is where processes are looked up.
const DefaultProc = "/proc"

// kubeletDefaultEndpoint is the kubelet's containerRuntimeEndpoint when
// neither its command line nor its configuration sets one.
const kubeletDefaultEndpoint = "unix:///run/containerd/containerd.sock"

// kubeletWitness proves, on a bare node, that the runtime's socket is the
// one this machine's kubelet uses now: a kubelet process is running, and
// the runtime endpoint on its command line (or in its configuration) is
// the same socket file as --cri-endpoint. A runtime's name and version
// prove nothing here: a k3s or RKE2 kubelet's containerd listens at
// /run/k3s/containerd/containerd.sock while Docker, or a containerd left
// from before a migration, answers at the default socket; two containerds
// of the same version answer alike. Only the kubelet knows which is its.
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
	kubelets, err := findKubelets(w.proc)
	if err != nil {
		return fmt.Errorf("look for the kubelet: %w", err)
	}
	if len(kubelets) == 0 {
		return unproven(ErrRuntimeUnproven, "no kubelet process runs on this machine (none named kubelet in %s), so nothing proves that "+
			"%s is the runtime of this node's pods; where the kubelet runs inside another process (k3s), use --liveness=api", w.proc, w.socket)
	}
	var seen []string
	for _, k := range kubelets {
		endpoint, err := kubeletEndpoint(k.args, os.ReadFile, filepath.Glob)
		if err != nil {
			seen = append(seen, fmt.Sprintf("pid %d: %v", k.pid, err))
			continue
		}
		path, err := endpointPath(endpoint)
		if err != nil {
			seen = append(seen, fmt.Sprintf("pid %d: %v", k.pid, err))
			continue
		}
		if id, err := statID(path); err == nil && id == ours {
			w.pid, w.start = k.pid, k.start
			w.check.reset(true)
			return nil
		}
		seen = append(seen, fmt.Sprintf("pid %d uses %s", k.pid, endpoint))
	}
	return unproven(ErrRuntimeUnproven, "no kubelet on this machine uses the socket %s (%s): it is not the runtime of this node's pods "+
		"(set --cri-endpoint to the kubelet's --container-runtime-endpoint)", w.socket, strings.Join(seen, "; "))
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

// findKubelets lists the processes whose command name is kubelet.
func findKubelets(proc string) ([]kubeletProcess, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	var found []kubeletProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue // gone meanwhile, or another process
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
		found = append(found, kubeletProcess{pid: pid, start: start, args: args})
	}
	return found, nil
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
// runtime.
type kubeletConfig struct {
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
}

// kubeletEndpoint returns the runtime endpoint that a kubelet with these
// arguments uses, by the kubelet's precedence: its command line's
// --container-runtime-endpoint, else the last of its --config-dir drop-ins
// (*.conf, in lexical order) that sets one, else its --config file, else
// the default.
func kubeletEndpoint(args []string, readFile func(string) ([]byte, error), glob func(string) ([]string, error)) (string, error) {
	var flagEndpoint, config, configDir string
	for i := 1; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		var target *string
		switch name {
		case "--container-runtime-endpoint":
			target = &flagEndpoint
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
	if flagEndpoint != "" {
		return flagEndpoint, nil
	}
	endpoint := kubeletDefaultEndpoint
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
		return nil
	}
	if config != "" {
		if err := read(config); err != nil {
			return "", err
		}
	}
	if configDir != "" {
		files, err := glob(filepath.Join(configDir, "*.conf"))
		if err != nil {
			return "", fmt.Errorf("kubelet configuration directory: %w", err)
		}
		slices.Sort(files)
		for _, f := range files {
			if err := read(f); err != nil {
				return "", err
			}
		}
	}
	return endpoint, nil
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
