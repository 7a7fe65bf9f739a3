package liveness

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/prune"
)

// runtimeView is the container runtime's list of sandboxes, handed to the
// prune only once its witnesses proved the runtime is the one this node's
// kubelet runs the pods with. It implements prune.SandboxSource.
type runtimeView struct {
	c *cri.Client
	// socket is proven before the runtime is asked, so that the
	// witnesses judge the runtime behind the socket it proved.
	socket *socketWitness
	// witnesses judge each answer, in order.
	witnesses []Witness
}

// Sandboxes implements prune.SandboxSource.
func (r *runtimeView) Sandboxes(ctx context.Context) (prune.SandboxIndex, error) {
	l, err := r.answer(ctx)
	if err != nil {
		return nil, err
	}
	return heldSandboxes{Sandboxes: l.Sandboxes, witnesses: r.all()}, nil
}

// all returns the socket witness and the others, in the order they hold.
func (r *runtimeView) all() []Witness { return append([]Witness{r.socket}, r.witnesses...) }

// answer asks the runtime who it is and what it runs, and has the
// witnesses judge it.
func (r *runtimeView) answer(ctx context.Context) (*RuntimeAnswer, error) {
	// The socket first, before the runtime answers on it: a runtime that
	// takes the socket while the other answers is seen after the answer.
	socket := r.socket
	if err := socket.Prove(ctx, Evidence{}); err != nil {
		return nil, err
	}
	name, version, err := r.c.Version(ctx)
	if err != nil {
		return nil, err
	}
	l, err := r.c.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	a := &RuntimeAnswer{Endpoint: r.c.Endpoint(), Name: name, Version: version, Sandboxes: l}
	if l.Ready() == 0 {
		// A runtime that runs nothing of this node's would condemn every
		// file; the kubelet's runs at least the pods of the node's
		// DaemonSets. An empty view proves nothing.
		return nil, unproven(ErrRuntimeUnproven, "%s (%s://%s) lists no ready sandbox: an empty list proves nothing", a.Endpoint, name, version)
	}
	if err := proveAll(ctx, r.witnesses, Evidence{Runtime: a}); err != nil {
		return nil, err
	}
	// A runtime that took the socket meanwhile may have answered in the
	// proven one's place.
	if !socket.same() {
		return nil, unproven(ErrRuntimeUnproven, "the socket %s was replaced while the runtime answered", socket.path)
	}
	return a, nil
}

// heldSandboxes is a runtime's list that counts as synced only while its
// witnesses hold: a socket that starts answering for another runtime, or a
// kubelet that is gone, stops a run before its next removal.
type heldSandboxes struct {
	*cri.Sandboxes
	witnesses []Witness
}

// Synced implements prune.SandboxIndex.
func (h heldSandboxes) Synced() bool { return h.Sandboxes.Synced() && holdAll(h.witnesses) }

// socketWitness remembers which socket file the runtime answered on: a
// runtime started in its place (a migration, a second containerd
// configured with the same address) makes a new one. It is the first of a
// runtime's witnesses, so that all others judge the runtime behind the
// socket they proved.
type socketWitness struct {
	path string

	mu    sync.Mutex
	id    fileID // of the socket as last proven; zero: not proven
	check recheck
}

// fileID identifies a file: a socket bound again at the same path is
// another file. The inode number alone may be given again at once to the
// new socket, so its change time counts too (a chmod then also stops a
// run, which errs on the safe side).
type fileID struct {
	dev, ino uint64
	ctime    syscall.Timespec
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no device and inode", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim}, nil //nolint:unconvert // Dev is uint32 on some platforms
}

// Name implements Witness.
func (w *socketWitness) Name() string { return "runtime-socket" }

// Prove implements Witness: it records the socket's identity. A socket
// that cannot be read is a failure to ask.
func (w *socketWitness) Prove(context.Context, Evidence) error {
	id, err := statID(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.id = fileID{}
		return fmt.Errorf("container runtime socket: %w", err)
	}
	w.id = id
	w.check.reset(true)
	return nil
}

// Holds implements Witness: the socket is still the file proven.
func (w *socketWitness) Holds() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.check.holds(w.sameLocked)
}

// same reports, now, whether the socket is the file proven.
func (w *socketWitness) same() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sameLocked()
}

func (w *socketWitness) sameLocked() bool {
	id, err := statID(w.path)
	return err == nil && w.id != fileID{} && id == w.id
}

// recheck limits how often Holds looks again, so that a removal pays for a
// system call only now and then: a change is seen within holdRecheck.
type recheck struct {
	at time.Time
	ok bool
}

// holdRecheck is how long a Holds answer is reused.
const holdRecheck = 200 * time.Millisecond

func (r *recheck) reset(ok bool) { r.at, r.ok = time.Now(), ok }

func (r *recheck) holds(look func() bool) bool {
	if !r.ok {
		return false
	}
	if time.Since(r.at) >= holdRecheck {
		r.reset(look())
	}
	return r.ok
}

// expectWitness checks the runtime's name (and version) against what the
// operator expects: a check that catches a mistake, never a proof on its
// own, since any runtime can answer to a name.
type expectWitness struct{ want string }

// Name implements Witness.
func (w expectWitness) Name() string { return "expect-runtime" }

// Prove implements Witness.
func (w expectWitness) Prove(_ context.Context, ev Evidence) error {
	a := ev.Runtime
	if !runtimeMatches(w.want, a.Name, a.Version) {
		return unproven(ErrRuntimeUnproven, "%s is %s://%s, not %s (--expect-runtime)", a.Endpoint, a.Name, a.Version, w.want)
	}
	return nil
}

// Holds implements Witness.
func (expectWitness) Holds() bool { return true }

// nodeRuntimeWitness checks the runtime's name and version against the
// Node's containerRuntimeVersion, as its kubelet reports it: the runtime
// the node's pods run on, given that the Node is proven.
type nodeRuntimeWitness struct {
	node string
	boot *bootWitness
}

// Name implements Witness.
func (w nodeRuntimeWitness) Name() string { return "node-runtime" }

// Prove implements Witness.
func (w nodeRuntimeWitness) Prove(_ context.Context, ev Evidence) error {
	a := ev.Runtime
	n := w.boot.lastNode()
	switch {
	case n == nil:
		return unproven(ErrRuntimeUnproven, "Node %q not proven to be this machine, so its runtime is unknown", w.node)
	case !runtimeMatches(n.runtime, a.Name, a.Version):
		return unproven(ErrRuntimeUnproven, "%s is %s://%s, but the kubelet of Node %q reports %q", a.Endpoint, a.Name, a.Version, w.node, n.runtime)
	}
	return nil
}

// Holds implements Witness.
func (nodeRuntimeWitness) Holds() bool { return true }

// runtimeMatches reports whether a runtime that calls itself name and
// version is the one want names, in the form of a Node's
// containerRuntimeVersion: "containerd://1.7.2", or "containerd" for any
// version. The kubelet writes the version as it parsed it: without a
// leading "v", and a version that is not semantic (Debian's "1.6.20~ds1")
// cut to its numbers, so a version matches when it starts with want's,
// up to a boundary.
func runtimeMatches(want, name, version string) bool {
	wantName, wantVersion, withVersion := strings.Cut(want, "://")
	if wantName != name {
		return false
	}
	if !withVersion {
		return true
	}
	wantVersion, version = strings.TrimPrefix(wantVersion, "v"), strings.TrimPrefix(version, "v")
	rest, ok := strings.CutPrefix(version, wantVersion)
	if !ok || wantVersion == "" {
		return false
	}
	if rest == "" {
		return true
	}
	// "1.6.2" is not "1.6.20", nor "1.6" "1.6.20".
	c := rest[0]
	return c != '.' && (c < '0' || c > '9')
}

// ParseExpectRuntime checks an --expect-runtime value: NAME or
// NAME://VERSION, as a Node's containerRuntimeVersion reads.
func ParseExpectRuntime(s string) error {
	name, version, withVersion := strings.Cut(s, "://")
	if name == "" || strings.ContainsAny(name, " /:") || (withVersion && (version == "" || strings.ContainsAny(version, " /"))) {
		return fmt.Errorf("invalid runtime %q: want NAME or NAME://VERSION, as the CONTAINER-RUNTIME column of kubectl get nodes -o wide", s)
	}
	return nil
}
