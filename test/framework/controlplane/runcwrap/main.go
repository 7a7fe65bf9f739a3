// Command runcwrap is the test node's runc under CRI-O
// (controlplane.WithCRIO): Debian's runc, run with the same arguments, after
// it has fitted each container's spec to what this machine allows:
//   - its oomScoreAdj raised to at least this process's own. This machine
//     refuses to lower a process's oom_score_adj (it lacks
//     CAP_SYS_RESOURCE), and CRI-O asks -998 of every pod's infra
//     container, the kubelet down to -997 of a Guaranteed pod's containers.
//     containerd has a setting for this (restrict_oom_score_adj, which the
//     node's containerd sets); CRI-O has none.
//   - no hugepage limits where no hugetlb cgroup hierarchy is mounted: the
//     kernel here has the controller (/proc/cgroups), so CRI-O asks for
//     limits, but the machine mounts no hierarchy of it, and runc fails to
//     join one.
//
// Either way runc would fail every container.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runc is Debian's.
const runc = "/usr/sbin/runc"

func main() {
	if err := restrict(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
		os.Exit(1)
	}
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// restrict raises the oomScoreAdj of the process spec that args give runc:
// a create's or run's bundle/config.json, an exec's --process file.
func restrict(args []string) error {
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return err
	}
	floor, err := strconv.Atoi(strings.TrimSpace(string(own)))
	if err != nil {
		return err
	}
	var cmd, bundle, process string
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() string {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
				return v
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b" || strings.HasPrefix(a, "--bundle="):
			bundle = value()
		case a == "--process" || a == "-p" || strings.HasPrefix(a, "--process="):
			process = value()
		case a == "--root" || a == "--log" || a == "--log-format" || a == "--pid-file" || a == "--console-socket":
			value() // a global or command flag with a value: not the command
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		}
	}
	switch {
	case (cmd == "create" || cmd == "run") && bundle != "":
		return raise(filepath.Join(bundle, "config.json"), floor, true)
	case cmd == "exec" && process != "":
		return raise(process, floor, false)
	}
	return nil
}

// raise rewrites the spec at path (a runtime spec, or with spec false a
// process) so that its oomScoreAdj is at least floor.
func raise(path string, floor int, spec bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	proc := doc
	if spec {
		if err := json.Unmarshal(doc["process"], &proc); err != nil || proc == nil {
			return nil // no process: nothing to raise
		}
	}
	changed := false
	var adj int
	if raw, ok := proc["oomScoreAdj"]; ok && json.Unmarshal(raw, &adj) == nil && adj < floor {
		proc["oomScoreAdj"] = json.RawMessage(strconv.Itoa(floor))
		changed = true
	}
	if spec {
		raw, err := json.Marshal(proc)
		if err != nil {
			return err
		}
		doc["process"] = raw
		if _, err := os.Stat("/sys/fs/cgroup/hugetlb"); errors.Is(err, os.ErrNotExist) {
			dropped, err := dropHugepageLimits(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			changed = changed || dropped
		}
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// dropHugepageLimits removes linux.resources.hugepageLimits from the
// runtime spec doc, and reports whether it had any.
func dropHugepageLimits(doc map[string]json.RawMessage) (bool, error) {
	var linux, resources map[string]json.RawMessage
	if json.Unmarshal(doc["linux"], &linux) != nil || linux == nil ||
		json.Unmarshal(linux["resources"], &resources) != nil || resources == nil {
		return false, nil
	}
	if _, ok := resources["hugepageLimits"]; !ok {
		return false, nil
	}
	delete(resources, "hugepageLimits")
	raw, err := json.Marshal(resources)
	if err != nil {
		return false, err
	}
	linux["resources"] = raw
	if raw, err = json.Marshal(linux); err != nil {
		return false, err
	}
	doc["linux"] = raw
	return true, nil
}
