package uninstall

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// status is the leader's record of the cluster phase, in the status Lease.
type status struct {
	c       *Coordinator
	ds      *DaemonSet
	content string
	missing string
	// clusterRoleDeleted: an attempt was deleting the ClusterRole.
	clusterRoleDeleted bool
}

// load returns the recorded phase of the content ("" if none).
func (s *status) load(ctx context.Context) (string, error) {
	l, err := s.c.leases().Get(ctx, StatusLeaseName(s.ds.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get status: %w", err)
	}
	a := l.GetAnnotations()
	if a[AnnotationContent] != s.content {
		return "", nil
	}
	s.missing = a[AnnotationMissingNodes]
	s.clusterRoleDeleted = a[AnnotationClusterRoleDeleted] == s.content
	return a[AnnotationPhase], nil
}

// set records phase (and the nodes the barrier gave up on) for the content.
func (s *status) set(ctx context.Context, phase, missing, msg string) error {
	s.missing = missing
	err := s.write(ctx, map[string]string{
		AnnotationContent: s.content, AnnotationPhase: phase, AnnotationMissingNodes: missing, AnnotationMessage: msg,
	})
	if err != nil {
		return fmt.Errorf("record status %s: %w", phase, err)
	}
	return nil
}

// markClusterRoleDeleted records that the self-cleanup of the content is
// about to delete the ClusterRole (cleanup.SelfOptions).
func (s *status) markClusterRoleDeleted(ctx context.Context) error {
	if err := s.write(ctx, map[string]string{AnnotationClusterRoleDeleted: s.content}); err != nil {
		return fmt.Errorf("record the ClusterRole's deletion: %w", err)
	}
	s.clusterRoleDeleted = true
	return nil
}

// write merges ann into the status Lease's annotations.
func (s *status) write(ctx context.Context, ann map[string]string) error {
	name := StatusLeaseName(s.ds.Name)
	holder := s.c.cfg.NodeName
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := s.c.leases().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = s.c.leases().Create(ctx, newLease(s.ds, name, RoleStatus, holder, ann), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		a := l.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		for k, v := range ann {
			a[k] = v
		}
		l.SetAnnotations(a)
		_ = unstructured.SetNestedField(l.Object, holder, "spec", "holderIdentity")
		_, err = s.c.leases().Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// informer lists and watches leases, pods or DaemonSets in the
// DaemonSet's namespace through the dynamic client, with list options set
// by tweak.
func (c *Coordinator) informer(gvr schema.GroupVersionResource, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	ri := c.dc.Resource(gvr).Namespace(c.cfg.Self.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return ri.Watch(ctx, o)
		},
	}
	// As generated informers do: a client that cannot stream a watch-list
	// (client-go's fakes) gets a plain LIST and WATCH.
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.dc), &unstructured.Unstructured{}, 0, cache.Indexers{})
}

// byName selects the one object of that name.
func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

func withLabels(sel labels.Selector) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }
}

// notifier pokes ch on every change an informer sees.
func notifier(ch chan struct{}) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(ch) },
		UpdateFunc: func(any, any) { poke(ch) },
		DeleteFunc: func(any) { poke(ch) },
	}
}

func unstructuredItems(objs []any) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// waitBarrier waits, with informers on the DaemonSet's pods and on the node
// report Leases, until every node running a pod of the DaemonSet reported
// content h, or the timeout passed. The timeout counts on this process's own
// clock from when it first saw a report, not from the report's timestamp:
// that comes from another node's clock, and a node whose clock is behind
// would otherwise make the leader give up on the missing nodes early. A new
// leader after a failover therefore waits a whole timeout again: later, never
// sooner. It returns the barrier as it was then; the error is for ctx only.
func (c *Coordinator) waitBarrier(ctx context.Context, log *slog.Logger, h string, ds *DaemonSet) (BarrierState, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pods := c.informer(podGVR, withLabels(ds.Selector))
	leases := c.informer(leaseGVR, withLabels(labels.SelectorFromSet(labels.Set{LabelDaemonSet: DaemonSetLabel(ds.Name), LabelRole: RoleNode})))
	changed := make(chan struct{}, 1)
	for _, inf := range []cache.SharedIndexInformer{pods, leases} {
		if _, err := inf.AddEventHandler(notifier(changed)); err != nil {
			return BarrierState{}, err
		}
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, leases.HasSynced) {
		return BarrierState{}, ctx.Err()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastMissing := -1
	var firstSeen time.Time // monotonic
	for {
		b := EvaluateBarrier(ds.UID, h, unstructuredItems(pods.GetStore().List()), unstructuredItems(leases.GetStore().List()))
		if b.Reached() {
			return b, nil
		}
		if len(b.Missing) != lastMissing {
			log.Info("waiting for nodes", "reported", len(b.Reported), "expected", len(b.Expected), "missing", b.Missing)
			lastMissing = len(b.Missing)
		}
		if !b.FirstReport.IsZero() && firstSeen.IsZero() {
			firstSeen = time.Now()
		}
		if !firstSeen.IsZero() && time.Since(firstSeen) >= c.cfg.Timeout {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-changed:
		case <-tick.C:
		}
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
