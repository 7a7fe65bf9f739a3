// Package cri lists the node's pod sandboxes over the container runtime's
// CRI socket, for sandbox liveness (prune.SandboxIndex).
//
// It speaks the gRPC protocol of the CRI v1 API (runtime.v1.RuntimeService,
// k8s.io/cri-api) with connect-go, which sweepd already links for its
// FinalizeCleanup endpoint, over HTTP/2 on the unix socket, and encodes the
// two messages it needs by hand (wire.go). Neither k8s.io/cri-client (it
// brings OpenTelemetry, k8s.io/component-base and klog) nor
// google.golang.org/grpc (about 5 MiB more resident memory for the node
// daemon) is linked; the tests run it against a grpc-go server of the real
// generated API (test/framework/fakecri).
package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/sweep-k8s/sweep/cachefile"
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

// The procedures called, by their gRPC names.
const (
	versionProcedure = "/runtime.v1.RuntimeService/Version"
	listProcedure    = "/runtime.v1.RuntimeService/ListPodSandbox"
)

// Client asks one runtime for its sandboxes. It holds no connection between
// calls: the daemon asks once per cycle (hourly by default), and a fresh
// connection never inherits the state of a runtime that was down at the
// previous cycle.
type Client struct {
	endpoint string
	path     string
	timeout  time.Duration
}

// New checks the endpoint; nothing is dialled until a call.
func New(endpoint string, timeout time.Duration) (*Client, error) {
	path, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{endpoint: endpoint, path: path, timeout: timeout}, nil
}

// Endpoint returns the runtime's endpoint, for logs.
func (c *Client) Endpoint() string { return c.endpoint }

// call makes one unary gRPC call over a connection of its own, within the
// timeout.
func call[Res any](ctx context.Context, c *Client, procedure string) (*Res, error) {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true) // gRPC: HTTP/2 without TLS on the socket
	tr := &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.path)
		},
	}
	defer tr.CloseIdleConnections()
	client := connect.NewClient[emptyRequest, Res](&http.Client{Transport: tr}, "http://localhost"+procedure,
		connect.WithGRPC(), connect.WithCodec(codec{}), connect.WithReadMaxBytes(maxMsgSize))
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := client.CallUnary(ctx, connect.NewRequest(&emptyRequest{}))
	if err != nil {
		return nil, fmt.Errorf("container runtime %s: %w", c.endpoint, err)
	}
	return resp.Msg, nil
}

// Version returns the runtime's name and version.
func (c *Client) Version(ctx context.Context) (name, version string, err error) {
	v, err := call[versionResponse](ctx, c, versionProcedure)
	if err != nil {
		return "", "", fmt.Errorf("version: %w", err)
	}
	return v.RuntimeName, v.RuntimeVersion, nil
}

// Sandboxes lists every sandbox the runtime knows, in every state: a
// NOTREADY sandbox is still the runtime's (the kubelet removes it, and its
// CNI DEL is the runtime's job), so its files are not stale. An error means
// no view at all; the caller must then delete nothing.
func (c *Client) Sandboxes(ctx context.Context) (*Sandboxes, error) {
	resp, err := call[listResponse](ctx, c, listProcedure)
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	return newSandboxes(resp.Items)
}

// ErrBadSandboxID means the runtime named a sandbox in a form that cache
// files never use: no file could ever match it, so every file would look
// stale. The list is refused.
var ErrBadSandboxID = errors.New("sandbox id is not 64 lowercase hex digits")

func newSandboxes(items []sandbox) (*Sandboxes, error) {
	s := &Sandboxes{ids: make(map[cachefile.SandboxID]sandboxOf, len(items)), pods: make(map[string]struct{}, len(items))}
	for _, it := range items {
		id, ok := cachefile.ParseSandboxID(it.ID)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrBadSandboxID, it.ID)
		}
		s.ids[id] = sandboxOf{podUID: it.PodUID, ready: it.Ready}
		if it.PodUID != "" {
			s.pods[it.PodUID] = struct{}{}
		}
		if it.Ready {
			s.ready++
		}
	}
	return s, nil
}

// Sandboxes is one complete list of the runtime's sandboxes. It implements
// prune.SandboxIndex.
type Sandboxes struct {
	ids   map[cachefile.SandboxID]sandboxOf
	pods  map[string]struct{} // the pod UIDs of the sandboxes
	ready int
}

// sandboxOf is what the list says of one sandbox.
type sandboxOf struct {
	podUID string
	ready  bool
}

// ReadyFor reports whether the runtime lists the sandbox id as SANDBOX_READY
// and made for the pod with this UID: the proof that this runtime runs the
// process that asks, whose own sandbox only the runtime that made it knows.
func (s *Sandboxes) ReadyFor(id cachefile.SandboxID, podUID string) bool {
	e, ok := s.ids[id]
	return ok && e.ready && podUID != "" && e.podUID == podUID
}

// Synced is always true: the list is complete by construction.
func (s *Sandboxes) Synced() bool { return true }

// Has implements prune.SandboxIndex.
func (s *Sandboxes) Has(id cachefile.SandboxID) bool { _, ok := s.ids[id]; return ok }

// HasPod reports whether a sandbox, in any state, was made for the pod with
// this UID: the UID the kubelet gave the runtime.
func (s *Sandboxes) HasPod(uid string) bool { _, ok := s.pods[uid]; return ok }

// Len returns the number of sandboxes, in any state.
func (s *Sandboxes) Len() int { return len(s.ids) }

// Ready returns the number of sandboxes in state SANDBOX_READY.
func (s *Sandboxes) Ready() int { return s.ready }
