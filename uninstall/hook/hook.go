// Package hook is the client side of the coordinated uninstall, what the
// Helm chart's pre-delete hook (`sweepd uninstall`) runs: it hands the
// uninstall config to the daemons through their cleanup ConfigMap and waits
// until they have cleaned every node and deleted their DaemonSet, and until
// what goes with the DaemonSet is gone. It writes only the cleanup
// ConfigMap, and reads the coordination Leases that the daemons' side,
// package uninstall, writes.
package hook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/uninstall"
)

// The hook, like the daemons, talks to the API server with the dynamic
// client only (see cmd/sweepd/deps_test.go).
var (
	leaseGVR     = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	podGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

	serviceAccountGVR     = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	roleGVR               = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	roleBindingGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	clusterRoleGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	clusterRoleBindingGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
)

// ErrTimeout is returned by Request when the cleanup did not finish in time.
var ErrTimeout = errors.New("uninstall cleanup did not finish in time")

// LabelRequest marks the cleanup ConfigMap created by Request.
const LabelRequest = "sweep.dev/cleanup-request"

// RequestOptions configures Request.
type RequestOptions struct {
	// Self is the daemons' DaemonSet and RBAC, which their self-cleanup
	// removes: Request succeeds only once the DaemonSet and the named RBAC
	// objects are gone. Empty RBAC names are not checked.
	Self cleanup.Self
	// ConfigMap is the cleanup ConfigMap, in the DaemonSet's namespace.
	ConfigMap string
	// FileConfig and ResourceConfig become the ConfigMap's keys; nil
	// leaves a key out.
	FileConfig, ResourceConfig []byte
	// Timeout bounds the whole wait.
	Timeout time.Duration
	// PollInterval spaces the reads of the DaemonSet and the status
	// Lease; default one second.
	PollInterval time.Duration
	Log          *slog.Logger
}

// Validate checks the options without touching anything: the DaemonSet's
// name and namespace, the ConfigMap's name and a positive timeout are
// required, and the configs must parse. Errors are *field.Error; those of
// the configs also wrap cleanup.ErrConfig.
func (o RequestOptions) Validate() error {
	switch {
	case o.Self.Namespace == "":
		return field.Errorf("Self.Namespace", "the DaemonSet's namespace is required")
	case o.Self.Name == "":
		return field.Errorf("Self.Name", "the DaemonSet's name is required")
	case o.ConfigMap == "":
		return field.Errorf("ConfigMap", "the cleanup ConfigMap's name is required")
	case o.Timeout <= 0:
		return field.Errorf("Timeout", "must be positive")
	}
	if _, err := cleanup.ParseFileConfig(o.FileConfig); err != nil {
		return field.Wrap("FileConfig", fmt.Errorf("%w: %s: %w", cleanup.ErrConfig, cleanup.FileConfigName, err))
	}
	if _, err := cleanup.ParseResourceConfig(o.ResourceConfig); err != nil {
		return field.Wrap("ResourceConfig", fmt.Errorf("%w: %s: %w", cleanup.ErrConfig, cleanup.ResourceConfigName, err))
	}
	return nil
}

// Request asks the daemons for an uninstall cleanup and waits for it: it
// creates or updates the cleanup ConfigMap (owned by the DaemonSet, so it
// goes with it), then waits until the DaemonSet it saw is gone, which the
// daemons do last, after every node is clean and the resources are deleted,
// and then until what goes with the DaemonSet is gone too: the RBAC named
// in o, the cleanup ConfigMap and the coordination Leases. A DaemonSet that
// does not exist means there is nothing to wait for. On timeout the error
// wraps ErrTimeout and names the phase, the leader's last message, the
// nodes that had not reported and the objects that are left; configs are
// checked first and an error wrapping cleanup.ErrConfig means nothing was
// done.
func Request(ctx context.Context, dc dynamic.Interface, o RequestOptions) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	dsClient := dc.Resource(uninstall.DaemonSetGVR).Namespace(o.Self.Namespace)
	u, err := dsClient.Get(ctx, o.Self.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log.Warn("DaemonSet not found: no daemon left to clean up, nothing to wait for", "daemonset", o.Self.Namespace+"/"+o.Self.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get DaemonSet: %w", err)
	}
	ds, err := uninstall.ParseDaemonSet(u)
	if err != nil {
		return fmt.Errorf("DaemonSet: %w", err)
	}
	h := uninstall.ContentHash(o.FileConfig, o.ResourceConfig)
	if err := applyConfigMap(ctx, dc, o, ds); err != nil {
		return err
	}
	log.Info("cleanup requested", "configmap", o.Self.Namespace+"/"+o.ConfigMap, "content", h[:12], "daemonset", ds.Name)

	var (
		st           statusView
		lastReported = -1
		dsGone       bool
		lastLeft     []string
	)
	tick := time.NewTicker(o.PollInterval)
	defer tick.Stop()
	for {
		if !dsGone {
			cur, err := dsClient.Get(ctx, o.Self.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) || (err == nil && (cur.GetUID() != ds.UID || cur.GetDeletionTimestamp() != nil)):
				dsGone = true
				log.Info("the DaemonSet deleted itself; waiting until its RBAC and coordination objects are gone")
			case err != nil && ctx.Err() == nil:
				log.Warn("cannot get the DaemonSet; retrying", "error", err)
			}
		}
		if dsGone {
			left := leftovers(ctx, dc, o, ds, false)
			if len(left) == 0 {
				log.Info("uninstall cleanup done: the DaemonSet and what goes with it are gone")
				return nil
			}
			if !slices.Equal(left, lastLeft) && ctx.Err() == nil {
				log.Info("waiting for the garbage collector", "left", left)
				lastLeft = left
			}
		} else {
			if next, err := readStatus(ctx, dc, o, h); err == nil && next != st {
				st = next
				log.Info("cluster phase", "phase", st.phase, "missing_nodes", st.missing, "message", st.message)
			}
			if st.phase == "" || st.phase == uninstall.PhaseBarrier {
				if b, err := listBarrier(ctx, dc, ds, h); err == nil && len(b.Reported) != lastReported {
					lastReported = len(b.Reported)
					log.Info("nodes done", "reported", len(b.Reported), "expected", len(b.Expected), "missing", b.Missing)
				}
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeoutError(context.WithoutCancel(ctx), dc, o, ds, h, st, dsGone)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// statusView is what the hook reads of the status Lease.
type statusView struct {
	phase, missing, message string
}

func readStatus(ctx context.Context, dc dynamic.Interface, o RequestOptions, h string) (statusView, error) {
	l, err := dc.Resource(leaseGVR).Namespace(o.Self.Namespace).Get(ctx, uninstall.StatusLeaseName(o.Self.Name), metav1.GetOptions{})
	if err != nil {
		return statusView{}, err
	}
	a := l.GetAnnotations()
	if a[uninstall.AnnotationContent] != h {
		return statusView{}, nil
	}
	return statusView{phase: a[uninstall.AnnotationPhase], missing: a[uninstall.AnnotationMissingNodes], message: a[uninstall.AnnotationMessage]}, nil
}

// leftovers lists what of the uninstall's promise is still there: the
// DaemonSet (with withDaemonSet), the RBAC named in o, and the cleanup
// ConfigMap and coordination Leases that the DaemonSet owns. An object that
// cannot be checked counts as left, with the reason.
func leftovers(ctx context.Context, dc dynamic.Interface, o RequestOptions, ds *uninstall.DaemonSet, withDaemonSet bool) []string {
	var left []string
	check := func(gvr schema.GroupVersionResource, ns, name string, ours func(*unstructured.Unstructured) bool) {
		if name == "" {
			return
		}
		object := objectName(gvr, ns, name)
		u, err := dc.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			left = append(left, object+" (cannot check: "+err.Error()+")")
		case ours == nil || ours(u):
			left = append(left, object)
		}
	}
	owned := func(u *unstructured.Unstructured) bool {
		for _, r := range u.GetOwnerReferences() {
			if r.UID == ds.UID {
				return true
			}
		}
		return false
	}
	if withDaemonSet {
		check(uninstall.DaemonSetGVR, o.Self.Namespace, o.Self.Name, func(u *unstructured.Unstructured) bool { return u.GetUID() == ds.UID })
	}
	check(serviceAccountGVR, o.Self.Namespace, o.Self.ServiceAccount, nil)
	check(roleGVR, o.Self.Namespace, o.Self.Role, nil)
	check(roleBindingGVR, o.Self.Namespace, o.Self.RoleBinding, nil)
	check(clusterRoleGVR, "", o.Self.ClusterRole, nil)
	check(clusterRoleBindingGVR, "", o.Self.ClusterRoleBinding, nil)
	check(configMapGVR, o.Self.Namespace, o.ConfigMap, owned)
	leases, err := dc.Resource(leaseGVR).Namespace(o.Self.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{uninstall.LabelDaemonSet: uninstall.DaemonSetLabel(ds.Name)}).String(),
	})
	if err != nil {
		return append(left, "coordination Leases (cannot check: "+err.Error()+")")
	}
	for i := range leases.Items {
		if owned(&leases.Items[i]) {
			left = append(left, objectName(leaseGVR, o.Self.Namespace, leases.Items[i].GetName()))
		}
	}
	return left
}

func objectName(gvr schema.GroupVersionResource, ns, name string) string {
	if ns == "" {
		return gvr.GroupResource().String() + " " + name
	}
	return gvr.GroupResource().String() + " " + ns + "/" + name
}

func timeoutError(ctx context.Context, dc dynamic.Interface, o RequestOptions, ds *uninstall.DaemonSet, h string, st statusView, dsGone bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var msg strings.Builder
	if dsGone {
		msg.WriteString("the DaemonSet is gone")
	} else {
		phase := st.phase
		if phase == "" {
			phase = uninstall.PhaseBarrier
		}
		fmt.Fprintf(&msg, "phase %q", phase)
		if st.message != "" {
			fmt.Fprintf(&msg, " (%s)", st.message)
		}
		if phase == uninstall.PhaseBarrier {
			if b, err := listBarrier(ctx, dc, ds, h); err != nil {
				fmt.Fprintf(&msg, ", barrier unknown: %v", err)
			} else {
				fmt.Fprintf(&msg, ", %d of %d nodes done, missing: %v", len(b.Reported), len(b.Expected), b.Missing)
			}
		}
	}
	if left := leftovers(ctx, dc, o, ds, !dsGone); len(left) > 0 {
		fmt.Fprintf(&msg, "; left: %s", strings.Join(left, ", "))
	}
	return fmt.Errorf("%w: %s", ErrTimeout, msg.String())
}

// listBarrier evaluates the barrier of content h for the DaemonSet with
// plain lists (for reporting; the leader uses informers).
func listBarrier(ctx context.Context, dc dynamic.Interface, ds *uninstall.DaemonSet, h string) (uninstall.BarrierState, error) {
	pods, err := dc.Resource(podGVR).Namespace(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ds.Selector.String()})
	if err != nil {
		return uninstall.BarrierState{}, err
	}
	leases, err := dc.Resource(leaseGVR).Namespace(ds.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{uninstall.LabelDaemonSet: uninstall.DaemonSetLabel(ds.Name), uninstall.LabelRole: uninstall.RoleNode}).String(),
	})
	if err != nil {
		return uninstall.BarrierState{}, err
	}
	return uninstall.EvaluateBarrier(ds.UID, h, itemPtrs(pods.Items), itemPtrs(leases.Items)), nil
}

func itemPtrs(items []unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func applyConfigMap(ctx context.Context, dc dynamic.Interface, o RequestOptions, ds *uninstall.DaemonSet) error {
	data := map[string]any{}
	if o.FileConfig != nil {
		data[cleanup.FileConfigName] = string(o.FileConfig)
	}
	if o.ResourceConfig != nil {
		data[cleanup.ResourceConfigName] = string(o.ResourceConfig)
	}
	owner := ds.OwnerReference()
	cms := dc.Resource(configMapGVR).Namespace(o.Self.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, o.ConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}}
			cm.SetName(o.ConfigMap)
			cm.SetNamespace(o.Self.Namespace)
			cm.SetLabels(map[string]string{LabelRequest: "true"})
			cm.SetOwnerReferences([]metav1.OwnerReference{owner})
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cm.Object["data"] = data
		delete(cm.Object, "binaryData")
		refs := cm.GetOwnerReferences()
		owned := false
		for _, r := range refs {
			owned = owned || r.UID == owner.UID
		}
		if !owned {
			cm.SetOwnerReferences(append(refs, owner))
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create or update ConfigMap %s/%s: %w", o.Self.Namespace, o.ConfigMap, err)
	}
	return nil
}
