package uninstall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/sweep-k8s/sweep/cleanup"
)

// ErrTimeout is returned by Request when the cleanup did not finish in time.
var ErrTimeout = errors.New("uninstall cleanup did not finish in time")

// LabelRequest marks the cleanup ConfigMap created by Request.
const LabelRequest = "sweep.dev/cleanup-request"

// RequestOptions configures Request.
type RequestOptions struct {
	// Namespace holds the DaemonSet and the ConfigMap.
	Namespace, ConfigMap, DaemonSet string
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

// Request asks the daemons for an uninstall cleanup and waits for it: it
// creates or updates the cleanup ConfigMap (owned by the DaemonSet, so it
// goes with it), then waits until the DaemonSet it saw is gone, which the
// daemons do last, after every node is clean and the resources are deleted.
// A DaemonSet that does not exist means there is nothing to wait for. On
// timeout the error wraps ErrTimeout and names the nodes that had not
// reported; configs are checked first and an error wrapping
// cleanup.ErrConfig means nothing was done.
func Request(ctx context.Context, dc dynamic.Interface, o RequestOptions) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if _, err := cleanup.ParseFileConfig(o.FileConfig); err != nil {
		return fmt.Errorf("%w: %s: %w", cleanup.ErrConfig, cleanup.FileConfigName, err)
	}
	if _, err := cleanup.ParseResourceConfig(o.ResourceConfig); err != nil {
		return fmt.Errorf("%w: %s: %w", cleanup.ErrConfig, cleanup.ResourceConfigName, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	dsClient := dc.Resource(DaemonSetGVR).Namespace(o.Namespace)
	u, err := dsClient.Get(ctx, o.DaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log.Warn("DaemonSet not found: no daemon left to clean up, nothing to wait for", "daemonset", o.Namespace+"/"+o.DaemonSet)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get DaemonSet: %w", err)
	}
	ds, err := parseDaemonSet(u)
	if err != nil {
		return fmt.Errorf("DaemonSet: %w", err)
	}
	h := ContentHash(o.FileConfig, o.ResourceConfig)
	if err := applyConfigMap(ctx, dc, o, ds); err != nil {
		return err
	}
	log.Info("cleanup requested", "configmap", o.Namespace+"/"+o.ConfigMap, "content", h[:12], "daemonset", ds.Name)

	lastPhase, lastReported := "", -1
	tick := time.NewTicker(o.PollInterval)
	defer tick.Stop()
	for {
		cur, err := dsClient.Get(ctx, o.DaemonSet, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.GetUID() != ds.UID) {
			log.Info("uninstall cleanup done: the DaemonSet deleted itself")
			return nil
		}
		if err == nil && cur.GetDeletionTimestamp() != nil {
			log.Info("uninstall cleanup done: the DaemonSet is being deleted")
			return nil
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("cannot get the DaemonSet; retrying", "err", err)
		}
		st, err := dc.Resource(leaseGVR).Namespace(o.Namespace).Get(ctx, StatusLeaseName(o.DaemonSet), metav1.GetOptions{})
		if err == nil {
			if a := st.GetAnnotations(); a[AnnotationContent] == h && a[AnnotationPhase] != lastPhase {
				lastPhase = a[AnnotationPhase]
				log.Info("cluster phase", "phase", lastPhase, "missingNodes", a[AnnotationMissingNodes], "message", a[AnnotationMessage])
			}
		}
		if lastPhase == "" || lastPhase == PhaseBarrier {
			if b, err := Barrier(ctx, dc, ds, h); err == nil && len(b.Reported) != lastReported {
				lastReported = len(b.Reported)
				log.Info("nodes done", "reported", len(b.Reported), "expected", len(b.Expected), "missing", b.Missing)
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeoutError(context.WithoutCancel(ctx), dc, ds, h, lastPhase)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func timeoutError(ctx context.Context, dc dynamic.Interface, ds *daemonSet, h, phase string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := Barrier(ctx, dc, ds, h)
	if err != nil {
		return fmt.Errorf("%w (phase %q; barrier unknown: %w)", ErrTimeout, phase, err)
	}
	if phase == "" {
		phase = PhaseBarrier
	}
	return fmt.Errorf("%w: phase %q, %d of %d nodes done, missing: %v", ErrTimeout, phase, len(b.Reported), len(b.Expected), b.Missing)
}

// Barrier evaluates the barrier of content h for the DaemonSet with plain
// lists (for reporting; the leader uses informers).
func Barrier(ctx context.Context, dc dynamic.Interface, ds *daemonSet, h string) (BarrierState, error) {
	pods, err := dc.Resource(podGVR).Namespace(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ds.Selector.String()})
	if err != nil {
		return BarrierState{}, err
	}
	leases, err := dc.Resource(leaseGVR).Namespace(ds.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelDaemonSet: dsLabel(ds.Name), LabelRole: roleNode}).String(),
	})
	if err != nil {
		return BarrierState{}, err
	}
	return EvaluateBarrier(ds.UID, h, itemPtrs(pods.Items), itemPtrs(leases.Items)), nil
}

func itemPtrs(items []unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func applyConfigMap(ctx context.Context, dc dynamic.Interface, o RequestOptions, ds *daemonSet) error {
	data := map[string]any{}
	if o.FileConfig != nil {
		data[cleanup.FileConfigName] = string(o.FileConfig)
	}
	if o.ResourceConfig != nil {
		data[cleanup.ResourceConfigName] = string(o.ResourceConfig)
	}
	owner := ownerRef(ds)
	cms := dc.Resource(configMapGVR).Namespace(o.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, o.ConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}}
			cm.SetName(o.ConfigMap)
			cm.SetNamespace(o.Namespace)
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
		return fmt.Errorf("create or update ConfigMap %s/%s: %w", o.Namespace, o.ConfigMap, err)
	}
	return nil
}
