// Package liveness gives a prune its views of what lives on this node (the
// API server's pods bound to it, the container runtime's sandboxes) and
// proves, before a view condemns anything and again before every removal,
// that each view is this node's, with witnesses that only this node's live
// kubelet can give (witness.go). The daemon and `sweepd prune` take their
// views from here alike.
package liveness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/internal/kubehint"
	"github.com/sweep-k8s/sweep/prune"
)

// Mode says what decides that a cache file's sandbox is dead.
type Mode string

// The liveness modes.
const (
	// ModeAPI: the pod is not on the node in the API server.
	ModeAPI Mode = "api"
	// ModeCRI: the container runtime does not know the sandbox; no API
	// server access at all.
	ModeCRI Mode = "cri"
	// ModeBoth: both must agree before a removal.
	ModeBoth Mode = "both"
)

// ParseMode parses api, cri or both.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAPI, ModeCRI, ModeBoth:
		return m, nil
	}
	return "", fmt.Errorf("invalid liveness %q: want api, cri or both", s)
}

// Pods reports whether the mode needs the API server's view of the pods.
func (m Mode) Pods() bool { return m != ModeCRI }

// Runtime reports whether the mode needs the container runtime.
func (m Mode) Runtime() bool { return m == ModeCRI || m == ModeBoth }

// Config is what views to take and how to prove them.
type Config struct {
	// Mode is what decides that a sandbox is dead; default api.
	Mode Mode
	// NodeName is this node; only its pods are viewed.
	NodeName string
	// BootIDFile is read for the current boot ID; default
	// prune.DefaultBootIDFile. The Node named NodeName must report it.
	BootIDFile string
	// SelfPodUID is the UID of the pod sweepd runs in; empty on a bare
	// node. When set, the view of the node's pods must hold it, and the
	// runtime must list this process's own sandbox READY for it.
	SelfPodUID string
	// ExpectRuntime, when set, names the runtime the socket must answer
	// as: NAME or NAME://VERSION. A check, not a proof.
	ExpectRuntime string
	// CRIEndpoint is the runtime's CRI socket, default cri.DefaultEndpoint;
	// CRITimeout bounds each call to it, default cri.DefaultTimeout.
	CRIEndpoint string
	CRITimeout  time.Duration
	// SyncTimeout bounds the wait for a fresh view of the pods and for a
	// renewal of the kubelet's Lease; default 30s.
	SyncTimeout time.Duration
	// RESTConfig returns the API server's client config, called only when
	// the mode needs the pods and no client was injected.
	RESTConfig func() (*rest.Config, error)
}

// Validate checks the configuration without touching anything. Errors are
// *field.Error naming the field ("Mode", "NodeName", ...).
func (c Config) Validate() error {
	if c.Mode != "" {
		if _, err := ParseMode(string(c.Mode)); err != nil {
			return field.Wrap("Mode", err)
		}
	}
	if c.NodeName == "" && c.Mode != ModeCRI {
		return field.Errorf("NodeName", "node name is required")
	}
	if c.ExpectRuntime != "" {
		if err := ParseExpectRuntime(c.ExpectRuntime); err != nil {
			return field.Wrap("ExpectRuntime", err)
		}
	}
	if c.Mode.Runtime() {
		if c.CRIEndpoint != "" {
			if _, err := cri.ParseEndpoint(c.CRIEndpoint); err != nil {
				return field.Wrap("CRIEndpoint", err)
			}
		}
		if c.CRITimeout < 0 {
			return field.Errorf("CRITimeout", "must not be negative")
		}
	}
	if c.SyncTimeout < 0 {
		return field.Errorf("SyncTimeout", "must not be negative")
	}
	return nil
}

// Option injects a dependency into New.
type Option func(*Views)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(v *Views) { v.log = l } }

// WithMetadataClient sets the client of the pods' view.
func WithMetadataClient(c metadata.Interface) Option { return func(v *Views) { v.client = c } }

// WithDynamicClient sets the client that reads the Node and its Lease.
func WithDynamicClient(c dynamic.Interface) Option { return func(v *Views) { v.dynamic = c } }

// WithRuntime sets the container runtime's client.
func WithRuntime(c *cri.Client) Option { return func(v *Views) { v.runtime = c } }

// Following makes the views follow the API server with watches, for a
// daemon: a prune cycle then makes no API request, and the executor checks
// the views' freshness and witnesses before every removal. Without it each
// cycle lists the node's pods once.
func Following() Option { return func(v *Views) { v.follow = true } }

// Views are the liveness views of a prune and their witnesses.
type Views struct {
	cfg     Config
	log     *slog.Logger
	client  metadata.Interface
	dynamic dynamic.Interface
	runtime *cri.Client
	follow  bool

	pods      *PodView     // following the API server; nil otherwise
	nodeWatch *nodeWatcher // beside pods
	lease     *leaseWitness

	podWitnesses  []Witness
	boot          *bootWitness // the pods' first witness, nil without them
	podSource     prune.PodSource
	sandboxSource *runtimeView
}

// New builds the views that cfg's mode needs, and their witnesses.
func New(cfg Config, opts ...Option) (*Views, error) {
	v := &Views{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(v)
	}
	c := &v.cfg
	c.Mode = cmp.Or(c.Mode, ModeAPI)
	c.BootIDFile = cmp.Or(c.BootIDFile, prune.DefaultBootIDFile)
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = 30 * time.Second
	}
	if c.Mode.Pods() {
		if err := v.buildPods(); err != nil {
			return nil, err
		}
	}
	if c.Mode.Runtime() {
		if err := v.buildRuntime(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// buildPods makes the view of the node's pods and its witnesses: the Node
// reports this boot, its kubelet's Lease renews, and the view holds the
// daemon's own pod.
func (v *Views) buildPods() error {
	c := v.cfg
	if c.NodeName == "" {
		return errors.New("the view of a node's pods needs the node's name")
	}
	var rc *rest.Config
	if v.client == nil || v.dynamic == nil || v.follow {
		if c.RESTConfig == nil {
			return errors.New("no kubernetes access: no client configuration")
		}
		var err error
		if rc, err = c.RESTConfig(); err != nil {
			return fmt.Errorf("no kubernetes access: %w", err)
		}
		if v.client == nil {
			if v.client, err = metadata.NewForConfig(rc); err != nil {
				return fmt.Errorf("metadata client: %w", err)
			}
		}
		if v.dynamic == nil {
			// The Lease witness reads the API server's Date of its GETs.
			dc := rest.CopyConfig(rc)
			dc.Wrap(recordServerDate)
			if v.dynamic, err = dynamic.NewForConfig(dc); err != nil {
				return fmt.Errorf("dynamic client: %w", err)
			}
		}
	}
	boot := &bootWitness{node: c.NodeName, bootIDFile: c.BootIDFile}
	if v.follow {
		var err error
		if v.pods, err = NewPodView(rc, c.NodeName); err != nil {
			return err
		}
		// With both views, a pod that may still run has its sandbox
		// listed: the runtime decides, from its own list.
		v.pods.runtimeDecides = c.Mode.Runtime()
		if v.nodeWatch, err = newNodeWatcher(rc, c.NodeName, c.SyncTimeout); err != nil {
			return err
		}
		boot.nodes = v.nodeWatch
		v.podSource = v.pods.source(c.SyncTimeout)
	} else {
		boot.nodes = nodeGetter{nodes: v.dynamic.Resource(nodesResource), name: c.NodeName}
		v.podSource = listSource{client: v.client, node: c.NodeName, timeout: c.SyncTimeout, log: v.log}
	}
	v.lease = newLeaseWitness(v.dynamic, c.NodeName, c.SyncTimeout)
	v.lease.log = v.log
	v.boot = boot
	v.podWitnesses = []Witness{boot, v.lease}
	if c.SelfPodUID != "" {
		v.podWitnesses = append(v.podWitnesses, &selfPodWitness{uid: c.SelfPodUID, node: c.NodeName})
	}
	v.podSource = provenPods{src: v.podSource, witnesses: v.podWitnesses}
	return nil
}

// buildRuntime makes the runtime's view and its witnesses: the socket is
// the one proven; in a pod, the runtime lists this process's own sandbox;
// on a bare node, a live kubelet uses the socket; the runtime answers as
// expected and as the Node reports.
func (v *Views) buildRuntime() error {
	c := v.cfg
	endpoint := cmp.Or(c.CRIEndpoint, cri.DefaultEndpoint)
	if v.runtime == nil {
		rt, err := cri.New(endpoint, c.CRITimeout)
		if err != nil {
			return fmt.Errorf("container runtime client: %w", err)
		}
		v.runtime = rt
	}
	socket, err := cri.ParseEndpoint(v.runtime.Endpoint())
	if err != nil {
		return fmt.Errorf("container runtime client: %w", err)
	}
	sw := &socketWitness{path: socket}
	var ws []Witness
	if c.SelfPodUID != "" {
		ws = append(ws, ownSandboxWitness{uid: c.SelfPodUID, mountInfo: DefaultMountInfo})
	} else {
		ws = append(ws, &kubeletWitness{socket: socket, proc: DefaultProc})
	}
	if c.ExpectRuntime != "" {
		ws = append(ws, expectWitness{want: c.ExpectRuntime})
	}
	if v.boot != nil {
		ws = append(ws, nodeRuntimeWitness{node: c.NodeName, boot: v.boot})
	}
	v.sandboxSource = &runtimeView{c: v.runtime, socket: sw, witnesses: ws}
	return nil
}

// Sources returns the views as a prune cycle takes them; Boot and Clock
// are the caller's.
func (v *Views) Sources() prune.Sources {
	src := prune.Sources{NodeName: v.cfg.NodeName}
	if v.podSource != nil {
		src.Pods = v.podSource
	}
	if v.sandboxSource != nil {
		src.Sandboxes = v.sandboxSource
	}
	return src
}

// Run keeps the views following the API server, and the kubelet's Lease
// watched (read with GET where it cannot be), until ctx ends.
func (v *Views) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if v.pods != nil {
		wg.Go(func() { v.pods.Run(ctx) })
		wg.Go(func() { v.nodeWatch.run(ctx) })
	}
	if v.lease != nil && v.follow {
		wg.Go(func() { v.lease.run(ctx) })
		wg.Go(func() { v.lease.watchLease(ctx) })
	}
	<-ctx.Done()
}

// Prove proves, outside a prune run, that the views are this node's: the
// pods' witnesses against the view as it is, and the runtime's against a
// list of its sandboxes. An error wrapping ErrNodeUnproven or
// ErrRuntimeUnproven is a failed proof; any other, a failure to ask.
func (v *Views) Prove(ctx context.Context) error {
	if v.pods != nil {
		if err := proveAll(ctx, v.podWitnesses, Evidence{Pods: v.pods}); err != nil {
			return err
		}
	}
	if v.sandboxSource != nil {
		if _, err := v.sandboxSource.answer(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Pods returns the view of the node's pods that follows the API server,
// or nil (not Following, or cri liveness).
func (v *Views) Pods() *PodView { return v.pods }

// Runtime returns the container runtime's client, or nil without runtime
// liveness.
func (v *Views) Runtime() *cri.Client { return v.runtime }

// Metadata returns the client of the pods' view, nil without one (cri
// liveness): what confirms with the API server that a pod is deleted.
func (v *Views) Metadata() metadata.Interface { return v.client }

// Dynamic returns the API server's dynamic client of the views, or nil
// without one (cri liveness).
func (v *Views) Dynamic() dynamic.Interface { return v.dynamic }

// NodePause returns the value of the Node's PauseAnnotation as the view
// that follows the Node holds it now, and whether it pauses sweep; false
// without that view (not Following, or cri liveness).
func (v *Views) NodePause() (string, bool) {
	if v.nodeWatch == nil {
		return "", false
	}
	return v.nodeWatch.pause()
}

// NodeDryRun returns the value of the Node's DryRunAnnotation as the view
// that follows the Node holds it now, and whether it is set; false without
// that view (not Following, or cri liveness).
func (v *Views) NodeDryRun() (string, bool) {
	if v.nodeWatch == nil {
		return "", false
	}
	return v.nodeWatch.dryRun()
}

// NodeUID returns the UID of the Node as the view that follows it holds it
// now, "" without that view or before its first list.
func (v *Views) NodeUID() string {
	if v.nodeWatch == nil {
		return ""
	}
	return v.nodeWatch.uid()
}

// FollowsNode reports whether the views follow the Node, so that its
// annotations (PauseAnnotation, DryRunAnnotation) count; not with cri
// liveness, which reads no Node.
func (v *Views) FollowsNode() bool { return v.nodeWatch != nil }

// Problem is a source that a view cannot follow now, and why.
type Problem struct {
	// Source is what the view follows: SourcePods or SourceNode.
	Source string
	// Err is the view's last list or watch error, with a hint where one
	// helps (WithHint).
	Err error
}

// The sources of Problem.
const (
	SourcePods = "pods" // the node's pods, from the API server
	SourceNode = "node" // the node's Node object, from the API server
)

// Problems returns the views that follow the API server and are not fresh
// now, with why; nil when all are. A view is not fresh for a moment at
// every renewal of its watch, so a caller waits before it calls a problem
// an outage.
func (v *Views) Problems() []Problem {
	var ps []Problem
	if v.pods != nil && !v.pods.Synced() {
		ps = append(ps, Problem{Source: SourcePods, Err: kubehint.WithHint(v.pods.LastError())})
	}
	if v.nodeWatch != nil && !v.nodeWatch.Synced() {
		ps = append(ps, Problem{Source: SourceNode, Err: kubehint.WithHint(v.nodeWatch.LastError())})
	}
	return ps
}

// Unheld says which views and witnesses do not hold now, for a log line
// that tells why a run stopped; nil when all hold.
func (v *Views) Unheld() error {
	var why []string
	if v.pods != nil && !v.pods.Synced() {
		why = append(why, fmt.Sprintf("the view of the node's pods is not fresh: %v", v.pods.LastError()))
	}
	ws := v.podWitnesses
	if v.sandboxSource != nil {
		ws = slices.Concat(ws, v.sandboxSource.all())
	}
	for _, w := range ws {
		if !w.Holds() {
			why = append(why, "witness "+w.Name()+" no longer holds")
		}
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}
