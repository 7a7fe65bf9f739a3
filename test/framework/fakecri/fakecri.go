// Package fakecri is a container runtime for tests: a gRPC server on a unix
// socket that serves the real CRI v1 RuntimeService API (k8s.io/cri-api)
// from a list of sandboxes the test sets. Only Version and ListPodSandbox
// are implemented; every other call answers Unimplemented. It can be made to
// hang or stop, to test that its clients fail closed.
package fakecri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Server is a fake runtime. Its methods are safe for concurrent use.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	// Endpoint is unix:///path/to/socket.
	Endpoint string
	path     string

	mu        sync.Mutex
	sandboxes []*runtimeapi.PodSandbox
	hang      chan struct{} // non-nil while calls hang; closed to release them
	name      string        // Version's runtime name; "" for fakecri
	version   string
	srv       *grpc.Server
	lists     atomic.Int64
}

// Start serves on a new socket until the test ends. The socket lives in a
// short temporary directory: a unix socket path is limited to 108 bytes,
// which t.TempDir can exceed.
func Start(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "fakecri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{path: filepath.Join(dir, "cri.sock")}
	s.Endpoint = "unix://" + s.path
	s.Resume(t)
	t.Cleanup(s.Stop)
	return s
}

// Resume serves again after Stop, on the same socket.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	_ = os.Remove(s.path)
	l, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	// Stop removes the socket. A listener that unlinked its path on Close
	// could remove the next Resume's socket: a Serve that starts after Stop
	// (the goroutine below, late on a loaded machine) closes its listener
	// then.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// Stop stops serving and removes the socket: calls fail as with a runtime
// that is down.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		s.SetHang(false) // release hanging calls so Stop returns
		srv.Stop()
	}
	_ = os.Remove(s.path)
}

// SetHang makes ListPodSandbox and Version block until SetHang(false) or the
// caller gives up: a runtime that accepts connections but does not answer.
func (s *Server) SetHang(hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case hang && s.hang == nil:
		s.hang = make(chan struct{})
	case !hang && s.hang != nil:
		close(s.hang)
		s.hang = nil
	}
}

// SetSandboxes replaces the runtime's sandboxes with ready ones of these IDs.
func (s *Server) SetSandboxes(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes = nil
	for _, id := range ids {
		s.sandboxes = append(s.sandboxes, sandbox(id, runtimeapi.PodSandboxState_SANDBOX_READY))
	}
}

// Add adds a sandbox in the given state.
func (s *Server) Add(id string, state runtimeapi.PodSandboxState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes = append(s.sandboxes, sandbox(id, state))
}

// AddPod adds a ready sandbox made for the pod with this UID, as the
// kubelet's sandbox of that pod.
func (s *Server) AddPod(id, podUID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := sandbox(id, runtimeapi.PodSandboxState_SANDBOX_READY)
	sb.Metadata.Uid = podUID
	s.sandboxes = append(s.sandboxes, sb)
}

// SetVersion sets what Version answers: the runtime's name and version.
func (s *Server) SetVersion(name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name, s.version = name, version
}

// Lists returns how many ListPodSandbox calls were answered or started.
func (s *Server) Lists() int64 { return s.lists.Load() }

func sandbox(id string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:       id,
		State:    state,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + id[:min(8, len(id))], Namespace: "default", Uid: "uid-" + id[:min(8, len(id))]},
	}
}

func (s *Server) wait(ctx context.Context) error {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang == nil {
		return nil
	}
	select {
	case <-hang:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Version implements runtimeapi.RuntimeServiceServer.
func (s *Server) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	name, version := s.name, s.version
	s.mu.Unlock()
	if name == "" {
		name, version = "fakecri", "0.0.0"
	}
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: name, RuntimeVersion: version, RuntimeApiVersion: "v1"}, nil
}

// ListPodSandbox implements runtimeapi.RuntimeServiceServer. Filters are
// ignored: sweepd asks for every sandbox.
func (s *Server) ListPodSandbox(ctx context.Context, _ *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.lists.Add(1)
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &runtimeapi.ListPodSandboxResponse{Items: append([]*runtimeapi.PodSandbox(nil), s.sandboxes...)}, nil
}
