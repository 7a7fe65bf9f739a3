// Package cri lists the node's pod sandboxes over the container runtime's
// CRI socket, for sandbox liveness (prune.SandboxIndex).
//
// It speaks the CRI v1 gRPC API (k8s.io/cri-api) with google.golang.org/grpc
// directly rather than through k8s.io/cri-client: the prune needs two calls,
// and cri-client brings OpenTelemetry, k8s.io/component-base and klog
// logging into a node daemon that must stay small and logs with slog.
package cri

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/prune"
)

// DefaultEndpoint is containerd's CRI socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// DefaultTimeout bounds one call to the runtime.
const DefaultTimeout = 10 * time.Second

// maxMsgSize is the kubelet's limit for CRI responses: a node with many
// sandboxes answers in one message.
const maxMsgSize = 16 << 20

// ParseEndpoint checks a CRI endpoint (unix:///absolute/path) and returns
// the socket's path.
func ParseEndpoint(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("cri endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "unix" || u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("cri endpoint %q: want unix:///absolute/path/to/socket", endpoint)
	}
	return u.Path, nil
}

// Client asks one runtime for its sandboxes. It holds no connection between
// calls: the daemon asks once per cycle (hourly by default), and a fresh
// connection never waits out the reconnect backoff of a runtime that was
// down at the previous cycle.
type Client struct {
	endpoint string
	timeout  time.Duration
}

// New checks the endpoint; nothing is dialled until a call.
func New(endpoint string, timeout time.Duration) (*Client, error) {
	if _, err := ParseEndpoint(endpoint); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{endpoint: endpoint, timeout: timeout}, nil
}

// Endpoint returns the runtime's endpoint, for logs.
func (c *Client) Endpoint() string { return c.endpoint }

func (c *Client) call(ctx context.Context, f func(context.Context, runtimeapi.RuntimeServiceClient) error) error {
	conn, err := grpc.NewClient(c.endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
	)
	if err != nil {
		return fmt.Errorf("container runtime %s: %w", c.endpoint, err)
	}
	// Closing a connection that only made one call has nothing to report.
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := f(ctx, runtimeapi.NewRuntimeServiceClient(conn)); err != nil {
		return fmt.Errorf("container runtime %s: %w", c.endpoint, err)
	}
	return nil
}

// Version returns the runtime's name and version.
func (c *Client) Version(ctx context.Context) (name, version string, err error) {
	err = c.call(ctx, func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil {
			return fmt.Errorf("version: %w", err)
		}
		name, version = v.GetRuntimeName(), v.GetRuntimeVersion()
		return nil
	})
	return name, version, err
}

// Sandboxes lists every sandbox the runtime knows, in every state: a
// NOTREADY sandbox is still the runtime's (the kubelet removes it, and its
// CNI DEL is the runtime's job), so its files are not stale. An error means
// no view at all; the caller must then delete nothing.
func (c *Client) Sandboxes(ctx context.Context) (*Sandboxes, error) {
	var s *Sandboxes
	err := c.call(ctx, func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return fmt.Errorf("list pod sandboxes: %w", err)
		}
		s, err = newSandboxes(resp.GetItems())
		return err
	})
	return s, err
}

// ErrBadSandboxID means the runtime named a sandbox in a form that cache
// files never use: no file could ever match it, so every file would look
// stale. The list is refused.
var ErrBadSandboxID = errors.New("sandbox id is not 64 lowercase hex digits")

func newSandboxes(items []*runtimeapi.PodSandbox) (*Sandboxes, error) {
	s := &Sandboxes{ids: make(map[prune.SandboxID]struct{}, len(items))}
	for _, it := range items {
		id, ok := prune.ParseSandboxID(it.GetId())
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrBadSandboxID, it.GetId())
		}
		s.ids[id] = struct{}{}
		if it.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			s.ready++
		}
	}
	return s, nil
}

// Sandboxes is one complete list of the runtime's sandboxes. It implements
// prune.SandboxIndex.
type Sandboxes struct {
	ids   map[prune.SandboxID]struct{}
	ready int
}

// Synced is always true: the list is complete by construction.
func (s *Sandboxes) Synced() bool { return true }

// Has implements prune.SandboxIndex.
func (s *Sandboxes) Has(id prune.SandboxID) bool { _, ok := s.ids[id]; return ok }

// Len returns the number of sandboxes, in any state.
func (s *Sandboxes) Len() int { return len(s.ids) }

// Ready returns the number of sandboxes in state SANDBOX_READY.
func (s *Sandboxes) Ready() int { return s.ready }
