package liveness

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
)

// stubWitness is a witness with a fixed verdict, that notes what it judged.
type stubWitness struct {
	err   error
	holds atomic.Bool
	mu    sync.Mutex
	seen  []Evidence
}

func (w *stubWitness) Name() string { return "stub" }

func (w *stubWitness) Prove(_ context.Context, ev Evidence) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, ev)
	return w.err
}

func (w *stubWitness) Holds() bool { return w.holds.Load() }

func mustSandboxID(t *testing.T, s string) prune.SandboxID {
	t.Helper()
	id, ok := cachefile.ParseSandboxID(s)
	if !ok {
		t.Fatalf("bad sandbox ID %q", s)
	}
	return id
}

// TestRuntimeViewSandboxes pins what the runtime's view hands a prune: a
// list only once every witness accepted what the runtime answered, and
// never a list with no READY sandbox (a runtime that runs none of the
// node's pods, not even the DaemonSets', would condemn every file: an empty
// list proves nothing). A runtime that does not answer is a failure to ask.
func TestRuntimeViewSandboxes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sandboxes func(*fakecri.Server)
		down      bool  // the runtime is stopped before it is asked
		witness   error // the stub witness's verdict
		// An error is wanted that wraps ErrRuntimeUnproven and holds want,
		// or, with askFails, any that does not wrap it: a failure to ask.
		unproven bool
		want     string
		askFails bool
	}{
		{name: "READY sandboxes, witnesses agree",
			sandboxes: func(s *fakecri.Server) {
				s.SetSandboxes(sbOwn)
				s.Add(sbOld, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			}},
		{name: "no sandbox at all: an empty list proves nothing",
			sandboxes: func(*fakecri.Server) {}, unproven: true, want: "an empty list proves nothing"},
		{name: "only NOTREADY sandboxes: an empty list proves nothing",
			sandboxes: func(s *fakecri.Server) {
				s.Add(sbOld, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
				s.Add(sbOther, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			}, unproven: true, want: "lists no ready sandbox"},
		{name: "a witness refuses: no list",
			sandboxes: func(s *fakecri.Server) { s.SetSandboxes(sbOwn) },
			witness:   unproven(ErrRuntimeUnproven, "not the kubelet's"), unproven: true, want: "not the kubelet's"},
		{name: "the runtime is down: a failure to ask",
			sandboxes: func(s *fakecri.Server) { s.SetSandboxes(sbOwn) }, down: true, askFails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakecri.Start(t)
			tc.sandboxes(srv)
			if tc.down {
				srv.Stop()
			}
			c, err := cri.New(srv.Endpoint, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			stub := &stubWitness{err: tc.witness}
			stub.holds.Store(true)
			view := &runtimeView{c: c, socket: &socketWitness{path: strings.TrimPrefix(srv.Endpoint, "unix://")}, witnesses: []Witness{stub}}
			idx, err := view.Sandboxes(t.Context())
			if tc.want != "" || tc.askFails {
				switch {
				case err == nil:
					t.Fatalf("Sandboxes: a list, want an error with %q", tc.want)
				case errors.Is(err, ErrRuntimeUnproven) != tc.unproven:
					t.Fatalf("Sandboxes: %v: wraps ErrRuntimeUnproven %v, want %v", err, !tc.unproven, tc.unproven)
				case !strings.Contains(err.Error(), tc.want):
					t.Fatalf("Sandboxes: %v, want %q in it", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Sandboxes: %v", err)
			}
			if !idx.Has(mustSandboxID(t, sbOwn)) || !idx.Has(mustSandboxID(t, sbOld)) || idx.Has(mustSandboxID(t, sbOther)) {
				t.Error("the list is not the runtime's")
			}
			// The witness judged what the runtime answered.
			if len(stub.seen) != 1 || stub.seen[0].Runtime == nil || stub.seen[0].Runtime.Name != "fakecri" ||
				stub.seen[0].Runtime.Endpoint != srv.Endpoint || stub.seen[0].Runtime.Sandboxes.Len() != 2 {
				t.Errorf("the witness judged %+v", stub.seen)
			}
			// The list counts as synced only while its witnesses hold.
			if !idx.Synced() {
				t.Error("not synced while the witnesses hold")
			}
			stub.holds.Store(false)
			if idx.Synced() {
				t.Error("synced after a witness stopped holding")
			}
		})
	}
}

// TestSocketWitness pins that the runtime's proof lasts only while the
// socket it was proven on is the same file: a runtime started in the old
// one's place (a migration, a second containerd configured with the same
// address) makes a new socket at the same path, and whatever the other
// witnesses proved of the old runtime says nothing of the new. A change is
// seen within holdRecheck.
func TestSocketWitness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
		holds  bool
	}{
		{"the same socket", func(*testing.T, string) {}, true},
		// The new file is made while the old one still exists, so that it
		// cannot be given the old one's inode number: see
		// TestSocketWitnessRuntimeRestarted for when it can.
		{"replaced by a new file made before the old one went", func(t *testing.T, path string) {
			if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out holdRecheck
			srv := fakecri.Start(t)
			path, err := cri.ParseEndpoint(srv.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			w := &socketWitness{path: path}
			if w.Holds() {
				t.Fatal("Holds before any Prove")
			}
			if err := w.Prove(t.Context(), Evidence{}); err != nil || !w.Holds() {
				t.Fatalf("Prove: %v, Holds %v", err, w.Holds())
			}
			tc.change(t, path)
			time.Sleep(holdRecheck + 50*time.Millisecond)
			if got := w.Holds(); got != tc.holds {
				t.Fatalf("Holds %v, want %v", got, tc.holds)
			}
		})
	}
}

// TestSocketWitnessRuntimeRestarted pins that a runtime that stops and binds
// its socket again at the same path (a restart, or another runtime started
// in its place) is seen, also when the filesystem gives the new socket the
// inode number that the old one freed, as ext4 and xfs do: a (device,
// inode) pair names a file only while the file exists. The runtime is
// restarted until the new socket has the old one's inode number (at most
// restarts times: on tmpfs, where /run usually is, numbers are not given
// again, and the case is a plain restart).
func TestSocketWitnessRuntimeRestarted(t *testing.T) {
	const restarts = 50
	srv := fakecri.Start(t)
	path, err := cri.ParseEndpoint(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	w := &socketWitness{path: path}
	if err := w.Prove(t.Context(), Evidence{}); err != nil {
		t.Fatal(err)
	}
	before, err := statID(path)
	if err != nil {
		t.Fatal(err)
	}
	var after fileID
	for i := 0; i < restarts && after != before; i++ {
		srv.Stop()
		srv.Resume(t)
		if after, err = statID(path); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("socket proven %+v, after the restart %+v", before, after)
	time.Sleep(holdRecheck + 50*time.Millisecond)
	if w.Holds() {
		t.Fatalf("Holds after the runtime bound a new socket at %s (inode number given again: %v)", path, after == before)
	}
}

// TestSocketWitnessNoSocket: a socket that cannot be read is a failure to
// ask (the runtime may be restarting), not a failed proof; and it proves
// nothing to hold on to.
func TestSocketWitnessNoSocket(t *testing.T) {
	w := &socketWitness{path: filepath.Join(t.TempDir(), "containerd.sock")}
	err := w.Prove(t.Context(), Evidence{})
	if err == nil || errors.Is(err, ErrRuntimeUnproven) || ProofError(err) != nil {
		t.Fatalf("Prove: %v, want a failure to ask", err)
	}
	if w.Holds() {
		t.Error("Holds without a socket")
	}
}

// swappingRuntime is a runtime whose socket is taken by another runtime
// while it answers its first list: a migration that happens between a
// question and its answer.
type swappingRuntime struct {
	*fakecri.Server
	once sync.Once
	swap func()
}

func (s *swappingRuntime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp, err := s.Server.ListPodSandbox(ctx, req)
	s.once.Do(s.swap)
	return resp, err
}

// serveCRI serves rt on a new unix socket at path until the test ends.
func serveCRI(t *testing.T, path string, rt runtimeapi.RuntimeServiceServer) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // the path may be another's by then
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// TestRuntimeViewSocketReplacedDuringList pins that a list is taken as the
// runtime's at the socket only if the socket is the same file from before
// the question to after the answer. Here the runtime that answers (one
// whose sandboxes are not the kubelet's) loses its socket to another (the
// kubelet's, say) between the question and the answer: the list is the old
// runtime's, and must not be handed on as proven for the socket as it is
// now. So the socket's identity must be taken before the runtime is asked:
// one taken after the answer (as the socket witness's Prove, run in
// proveAll, takes it) is already the new socket's.
func TestRuntimeViewSocketReplacedDuringList(t *testing.T) {
	dir, err := os.MkdirTemp("", "swap") // short: a socket path has at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "cri.sock")

	old := &fakecri.Server{}
	old.SetSandboxes(sbOther) // none of the kubelet's pods
	kubelets := &fakecri.Server{}
	kubelets.SetSandboxes(sbOwn)
	serveCRI(t, path, &swappingRuntime{Server: old, swap: func() {
		// The new runtime binds beside and takes the path over, as a
		// socket made before the old one is gone: a new inode.
		serveCRI(t, path+".new", kubelets)
		if err := os.Rename(path+".new", path); err != nil {
			t.Error(err)
		}
	}})

	c, err := cri.New("unix://"+path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	view := &runtimeView{c: c, socket: &socketWitness{path: path}}
	idx, err := view.Sandboxes(t.Context())
	if err != nil {
		return // refused: the list was not taken as the new runtime's
	}
	time.Sleep(holdRecheck + 50*time.Millisecond) // any re-check is done
	if idx.Synced() {
		t.Fatalf("the old runtime's list (has its sandbox %v, has the kubelet's %v) is held as proven for the socket that "+
			"another runtime took while it answered", idx.Has(mustSandboxID(t, sbOther)), idx.Has(mustSandboxID(t, sbOwn)))
	}
}

// TestExpectWitness pins the --expect-runtime check: the runtime must answer
// to the name (and version) the operator expects, else nothing is proven.
func TestExpectWitness(t *testing.T) {
	for _, tc := range []struct {
		want, name, version string
		ok                  bool
	}{
		{"containerd", "containerd", "v2.1.4", true},
		{"containerd://2.1.4", "containerd", "v2.1.4", true},
		{"containerd://2.1.4", "containerd", "2.1.40", false},
		{"containerd://1.7", "containerd", "2.1.4", false},
		{"containerd", "cri-o", "1.34.1", false},
		{"cri-o://1.34.1", "cri-o", "1.34.1", true},
		{"docker", "fakecri", "0.0.0", false},
	} {
		a := &RuntimeAnswer{Endpoint: "unix:///run/containerd/containerd.sock", Name: tc.name, Version: tc.version}
		err := expectWitness{want: tc.want}.Prove(t.Context(), Evidence{Runtime: a})
		switch {
		case tc.ok && err != nil:
			t.Errorf("want %q, runtime %s://%s: %v, want proven", tc.want, tc.name, tc.version, err)
		case !tc.ok && (!errors.Is(err, ErrRuntimeUnproven) || !strings.Contains(err.Error(), "--expect-runtime")):
			t.Errorf("want %q, runtime %s://%s: %v, want a failed proof naming --expect-runtime", tc.want, tc.name, tc.version, err)
		}
	}
}

// TestNodeRuntimeWitness pins the check of the runtime against what the
// Node's kubelet reports it runs: it needs the Node proven to be this
// machine first (an unproven Node's report is anyone's), and then the
// runtime must answer as the Node reports.
func TestNodeRuntimeWitness(t *testing.T) {
	for _, tc := range []struct {
		name          string
		node          *nodeInfo // the Node as last proven; nil: not proven
		rtName, rtVer string
		want          string // "": proven
	}{
		{"Node not proven", nil, "containerd", "2.1.4", "not proven"},
		{"the runtime the Node reports", &nodeInfo{bootID: "b", runtime: "containerd://2.1.4"}, "containerd", "v2.1.4", ""},
		{"another runtime", &nodeInfo{bootID: "b", runtime: "containerd://2.1.4"}, "cri-o", "2.1.4", `reports "containerd://2.1.4"`},
		{"another version", &nodeInfo{bootID: "b", runtime: "containerd://2.1.4"}, "containerd", "1.7.27", `reports "containerd://2.1.4"`},
		{"a Node that reports no runtime", &nodeInfo{bootID: "b"}, "containerd", "2.1.4", `reports ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			boot := &bootWitness{node: "node-a"}
			boot.setLast(tc.node)
			a := &RuntimeAnswer{Endpoint: "unix:///run/containerd/containerd.sock", Name: tc.rtName, Version: tc.rtVer}
			err := nodeRuntimeWitness{node: "node-a", boot: boot}.Prove(t.Context(), Evidence{Runtime: a})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Prove: %v, want proven", err)
			case tc.want == "":
			case !errors.Is(err, ErrRuntimeUnproven) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Prove: %v, want a failed proof with %q", err, tc.want)
			}
		})
	}
}
