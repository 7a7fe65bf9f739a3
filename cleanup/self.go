package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// Defaults of SelfOptions, spectro-cleanup's.
const (
	DefaultServiceAccount  = "spectro-cleanup"
	DefaultRole            = "spectro-cleanup-role"
	DefaultRoleBinding     = "spectro-cleanup-rolebinding"
	DefaultFinalizeTimeout = 30 * time.Second
)

var (
	serviceAccountGVR     = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	roleGVR               = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	roleBindingGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	clusterRoleGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	clusterRoleBindingGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
)

// SelfOptions names the cleanup workload and its RBAC.
type SelfOptions struct {
	// GVR, Name and Namespace identify the object the cleanup runs as (a
	// Job, Pod or DaemonSet).
	GVR       schema.GroupVersionResource
	Name      string
	Namespace string
	// ServiceAccount, Role and RoleBinding live in Namespace; they get an
	// ownerReference to the self object so that the garbage collector
	// removes them after it. Empty names are skipped.
	ServiceAccount, Role, RoleBinding string
	// ClusterRole and ClusterRoleBinding cannot be owned by a namespaced
	// object, so they are deleted explicitly, together with the self object.
	ClusterRole, ClusterRoleBinding string
	// Finalize, when not nil, is waited for (up to FinalizeTimeout) before
	// deleting anything: it is closed by the FinalizeCleanup endpoint.
	Finalize        <-chan struct{}
	FinalizeTimeout time.Duration
	// DryRun checks everything with server-side dry-run requests.
	DryRun bool
	Log    *slog.Logger
}

// SelfCleanup removes the cleanup workload: it puts an ownerReference to the
// self object on the ServiceAccount, Role and RoleBinding that exist,
// waits for Finalize (if set), then deletes the ClusterRoleBinding,
// ClusterRole and the self object. A missing RBAC object is logged and
// skipped. Failures are recorded in sum as must-delete failures; the error
// is for configuration problems (wrapping ErrConfig) and discovery failures.
func SelfCleanup(ctx context.Context, c *Clients, opts SelfOptions, sum *Summary) error {
	log := logger(opts.Log)
	t, err := resolveGVR(c.Mapper, opts.GVR)
	if err != nil {
		return fmt.Errorf("self object: %w", err)
	}
	selfName := fmt.Sprintf("%s %s/%s", opts.GVR.GroupResource(), opts.Namespace, opts.Name)
	fail := func(object, reason string) {
		log.Error("self-cleanup", "object", object, "outcome", string(Failed), "reason", reason)
		sum.add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: reason, MustDelete: true})
	}
	if err := checkSelfScope(t, opts.Namespace); err != nil {
		return err
	}
	if !t.Served {
		fail(selfName, "resource type not served by the API server")
		return nil
	}
	selfRI := c.Dynamic.Resource(t.GVR).Namespace(opts.Namespace)
	self, err := selfRI.Get(ctx, opts.Name, metav1.GetOptions{})
	if err != nil {
		fail(selfName, "get: "+err.Error())
		return nil
	}
	owner := metav1.OwnerReference{
		APIVersion: self.GetAPIVersion(),
		Kind:       self.GetKind(),
		Name:       self.GetName(),
		UID:        self.GetUID(),
	}

	var dryRun []string
	if opts.DryRun {
		dryRun = []string{metav1.DryRunAll}
	}
	record := func(object string, o Outcome, reason string) {
		log.Info("self-cleanup", "object", object, "outcome", string(o), "reason", reason)
		sum.add(Record{Phase: PhaseSelf, Object: object, Outcome: o, Reason: reason})
	}
	if opts.Namespace == "" {
		log.Warn("self object is cluster-scoped: not adopting the namespaced ServiceAccount, Role and RoleBinding")
	} else {
		for _, dep := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{{serviceAccountGVR, opts.ServiceAccount}, {roleGVR, opts.Role}, {roleBindingGVR, opts.RoleBinding}} {
			if dep.name == "" {
				continue
			}
			object := fmt.Sprintf("%s %s/%s", dep.gvr.GroupResource(), opts.Namespace, dep.name)
			ri := c.Dynamic.Resource(dep.gvr).Namespace(opts.Namespace)
			added := false
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				obj, err := ri.Get(ctx, dep.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				refs := obj.GetOwnerReferences()
				for _, r := range refs {
					if r.UID == owner.UID {
						return nil
					}
				}
				obj.SetOwnerReferences(append(refs, owner))
				if _, err := ri.Update(ctx, obj, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
					return err
				}
				added = true
				return nil
			})
			switch {
			case apierrors.IsNotFound(err):
				log.Warn("self-cleanup: RBAC object not found, skipping", "object", object)
				record(object, Skipped, "not found")
			case err != nil:
				// Not fatal either: the object outlives us, but the self
				// object can still go.
				log.Error("self-cleanup: cannot set ownerReference", "object", object, "err", err)
				sum.add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: "set ownerReference: " + err.Error()})
			case added && opts.DryRun:
				log.Info("self-cleanup: ownerReference would be set", "object", object, "owner", selfName)
			case added:
				log.Info("self-cleanup: ownerReference set", "object", object, "owner", selfName)
			default:
				log.Info("self-cleanup: ownerReference already present", "object", object, "owner", selfName)
			}
		}
	}

	if opts.Finalize != nil && !opts.DryRun {
		timeout := opts.FinalizeTimeout
		if timeout <= 0 {
			timeout = DefaultFinalizeTimeout
		}
		log.Info("waiting for FinalizeCleanup", "timeout", timeout.String())
		timer := time.NewTimer(timeout)
		select {
		case <-opts.Finalize:
			log.Info("FinalizeCleanup received")
		case <-timer.C:
			log.Info("FinalizeCleanup not received in time, going ahead", "timeout", timeout.String())
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}

	// The cluster-scoped RBAC and the self object are deleted at once: each
	// request is authorized before any of the deletions reaches the
	// authorizer's cache, so it does not matter whether the permission to
	// delete the self object (or the RBAC) comes from the ClusterRole. In
	// sequence, deleting the ClusterRoleBinding first could revoke the right
	// to delete the Job, and deleting the Job first lets the garbage
	// collector remove the ServiceAccount (and with it our token) before
	// the ClusterRoleBinding is gone.
	bg := metav1.DeletePropagationBackground
	type del struct {
		gvr    schema.GroupVersionResource
		ns     string
		name   string
		uid    *metav1.Preconditions
		isSelf bool
	}
	dels := []del{
		{gvr: clusterRoleBindingGVR, name: opts.ClusterRoleBinding},
		{gvr: clusterRoleGVR, name: opts.ClusterRole},
		{gvr: t.GVR, ns: opts.Namespace, name: opts.Name, uid: &metav1.Preconditions{UID: &owner.UID}, isSelf: true},
	}
	var wg sync.WaitGroup
	for _, d := range dels {
		if d.name == "" {
			continue
		}
		wg.Go(func() {
			object := fmt.Sprintf("%s %s", d.gvr.GroupResource(), d.name)
			if d.isSelf {
				object = selfName
			}
			err := c.Dynamic.Resource(d.gvr).Namespace(d.ns).Delete(ctx, d.name, metav1.DeleteOptions{
				PropagationPolicy: &bg, Preconditions: d.uid, DryRun: dryRun,
			})
			switch {
			case err == nil && opts.DryRun:
				record(object, WouldDelete, "")
			case err == nil:
				record(object, Deleted, "")
			case apierrors.IsNotFound(err) && !d.isSelf:
				log.Warn("self-cleanup: RBAC object not found, skipping", "object", object)
				record(object, Skipped, "not found")
			case d.isSelf:
				fail(object, "delete: "+err.Error())
			default:
				log.Error("self-cleanup: delete failed", "object", object, "err", err)
				sum.add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: "delete: " + err.Error(), MustDelete: true})
			}
		})
	}
	wg.Wait()
	return nil
}

func checkSelfScope(t Target, namespace string) error {
	switch {
	case !t.Served:
		return nil
	case t.Namespaced && namespace == "":
		return fmt.Errorf("%w: --self-namespace is required: %s is namespaced", ErrConfig, t.Kind)
	case !t.Namespaced && namespace != "":
		return fmt.Errorf("%w: --self-namespace must be empty: %s is cluster-scoped", ErrConfig, t.Kind)
	}
	return nil
}
