package liveness

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"slices"
	"strings"

	"github.com/sweep-k8s/sweep/cachefile"
)

// DefaultMountInfo is where a process reads its own mounts.
const DefaultMountInfo = "/proc/self/mountinfo"

// sandboxFiles are the files a CRI runtime bind-mounts into each container
// of a pod from the pod sandbox's own directory, which is named by the
// sandbox's ID: containerd's .../io.containerd.grpc.v1.cri/sandboxes/ID/
// hostname, CRI-O's .../overlay-containers/ID/userdata/hostname.
var sandboxFiles = []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"}

// ownSandboxWitness proves, from inside a pod, that the runtime is the one
// that runs this very process: it lists READY the sandbox that this
// process's container was made in, for this pod's UID. A DaemonSet pod
// keeps its UID when the kubelet moves to another runtime, so an old
// runtime may still list a sandbox of the pod's UID, even READY; but the
// sandbox's ID is the runtime's own random choice, and only the runtime
// that made this process's sandbox knows it.
type ownSandboxWitness struct {
	uid       string
	mountInfo string // DefaultMountInfo but in tests
}

// Name implements Witness.
func (w ownSandboxWitness) Name() string { return "own-sandbox" }

// Prove implements Witness.
func (w ownSandboxWitness) Prove(_ context.Context, ev Evidence) error {
	data, err := os.ReadFile(w.mountInfo)
	if err != nil {
		return unproven(ErrRuntimeUnproven, "cannot read this process's mounts to find its own sandbox: %w", err)
	}
	ids := ownSandboxIDs(data)
	if len(ids) == 0 {
		return unproven(ErrRuntimeUnproven, "this process's %s is mounted from no pod sandbox's directory, so its own sandbox is unknown "+
			"(--pod-uid is for sweepd in a pod; on a bare node leave it empty)", strings.Join(sandboxFiles, ", "))
	}
	a := ev.Runtime
	for _, id := range ids {
		if a.Sandboxes.ReadyFor(id, w.uid) {
			return nil
		}
	}
	what := "no sandbox of this pod"
	switch {
	case a.Sandboxes.Has(ids[0]):
		what = "the sandbox this process runs in, but not READY for this pod"
	case a.Sandboxes.HasPod(w.uid):
		what = "only other sandboxes of this pod (an old runtime keeps them)"
	}
	return unproven(ErrRuntimeUnproven, "%s (%s://%s) lists %s: not %s READY for pod UID %s, the sandbox this process runs in, "+
		"so it is not the runtime that runs this node's pods (check --cri-endpoint)", a.Endpoint, a.Name, a.Version, what, ids[0], w.uid)
}

// Holds implements Witness: a process's sandbox is the same for its
// lifetime; a runtime replaced at the socket is the socket witness's to see.
func (ownSandboxWitness) Holds() bool { return true }

// ownSandboxIDs returns the sandbox IDs that the mounts of sandboxFiles name
// in their source paths (mountinfo's root field): the last path element of
// 64 lowercase hex digits of each, in order and without repeats. Of several
// mounts on one file (a machine that is itself a container), the last is
// the one the process sees.
func ownSandboxIDs(mountInfo []byte) []cachefile.SandboxID {
	roots := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(mountInfo))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE ...
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && slices.Contains(sandboxFiles, unescapeMount(f[4])) {
			roots[unescapeMount(f[4])] = unescapeMount(f[3])
		}
	}
	var ids []cachefile.SandboxID
	for _, file := range sandboxFiles {
		// The last ID in the path is the sandbox's directory; an earlier
		// one is a directory further up (a kind node's volume).
		els := strings.Split(roots[file], "/")
		for i := len(els) - 1; i >= 0; i-- {
			if id, ok := cachefile.ParseSandboxID(els[i]); ok {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
				break
			}
		}
	}
	return ids
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, \011,
// \012, \134) of a path.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
