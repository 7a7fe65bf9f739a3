package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// DefaultFinalizeTimeout, spectro-cleanup's, is the wait for
// FinalizeCleanup when SelfOptions.FinalizeTimeout is not positive.
const DefaultFinalizeTimeout = 30 * time.Second

var (
	serviceAccountGVR     = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	roleGVR               = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	roleBindingGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	clusterRoleGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	clusterRoleBindingGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	accessReviewGVR       = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}
)

// Self names the cleanup workload and the RBAC it runs with: what the
// self-cleanup removes, and what the resource phase must leave to it.
// `sweepd cleanup` (a Job, Pod or DaemonSet) and the daemon's uninstall
// cleanup (its DaemonSet) both describe themselves with it.
type Self struct {
	// GVR, Name and Namespace identify the object the cleanup runs as.
	GVR       schema.GroupVersionResource
	Name      string
	Namespace string
	// ServiceAccount, Role and RoleBinding live in Namespace; they get an
	// ownerReference to the self object so that the garbage collector
	// removes them after it. Empty names are skipped.
	ServiceAccount, Role, RoleBinding string
	// ClusterRole and ClusterRoleBinding go together: the binding gets an
	// ownerReference to the ClusterRole, and one delete of the ClusterRole
	// takes both. Empty names are skipped.
	ClusterRole, ClusterRoleBinding string
}

// Validate checks what can be checked without the API server.
func (s Self) Validate() error {
	if (s.ClusterRole == "") != (s.ClusterRoleBinding == "") {
		return fmt.Errorf("%w: the ClusterRole and ClusterRoleBinding names go together", ErrConfig)
	}
	return nil
}

// Keep lists the self object and its RBAC: the resource phase leaves them to
// the self-cleanup, since deleting one midway would kill the run or its
// credentials (older spectro-cleanup configs list the workload as the last
// entry).
func (s Self) Keep() []ObjectRef {
	if s.Name == "" {
		return nil
	}
	keep := []ObjectRef{{Resource: s.GVR.GroupResource(), Namespace: s.Namespace, Name: s.Name}}
	for _, k := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{serviceAccountGVR, s.Namespace, s.ServiceAccount},
		{roleGVR, s.Namespace, s.Role},
		{roleBindingGVR, s.Namespace, s.RoleBinding},
		{clusterRoleGVR, "", s.ClusterRole},
		{clusterRoleBindingGVR, "", s.ClusterRoleBinding},
	} {
		if k.name != "" {
			keep = append(keep, ObjectRef{Resource: k.gvr.GroupResource(), Namespace: k.ns, Name: k.name})
		}
	}
	return keep
}

// ObjectName names the self object as the summary's records do.
func (s Self) ObjectName() string {
	return objectName(s.GVR.GroupResource(), s.Namespace, s.Name)
}

// ResolveSelf looks the self object's type up through mapper, before
// anything is deleted: it returns the GVR as discovery spells it (the
// resource phase's keep list is matched against that) and refuses, with an
// error wrapping ErrConfig, a type the API server does not serve (the
// workload runs as an object of it: a mistyped GVR, which would only fail
// after everything else was deleted) or a Namespace that does not fit its
// scope. Discovery failures do not wrap ErrConfig.
func ResolveSelf(mapper Mapper, s Self) (schema.GroupVersionResource, error) {
	t, err := resolveGVR(mapper, s.GVR)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("self object: %w", err)
	}
	if !t.Served {
		return schema.GroupVersionResource{}, fmt.Errorf("%w: self object: %s", ErrConfig, t.notServed())
	}
	if err := checkSelfScope(t, s.Namespace); err != nil {
		return schema.GroupVersionResource{}, err
	}
	return t.GVR, nil
}

// SelfOptions configures SelfCleanup.
type SelfOptions struct {
	Self
	// Finalize, when not nil, is waited for (up to FinalizeTimeout) before
	// deleting anything: it is closed by the FinalizeCleanup endpoint.
	Finalize        <-chan struct{}
	FinalizeTimeout time.Duration
	// BeforeClusterRoleDelete, when set, is called right before the
	// ClusterRole is deleted, while every right is still there, so that
	// the caller can record it (the daemon does, in its status Lease). An
	// error stops the self-cleanup before anything is deleted.
	BeforeClusterRoleDelete func(context.Context) error
	// ClusterRoleDeleted says that an earlier attempt recorded (with
	// BeforeClusterRoleDelete) that it was deleting the ClusterRole. A
	// ClusterRole that can no longer be read is then taken for gone: the
	// right to read it came from its own rules.
	ClusterRoleDeleted bool
	// DryRun checks everything with server-side dry-run requests.
	DryRun bool
	Log    *slog.Logger
}

// SelfCleanup removes the cleanup workload and its RBAC in an order that
// does not depend on how soon the API server's authorizer sees a deletion:
// an object the workload's rights come from is removed only by the
// workload's last request, or by the garbage collector after it.
//
//  1. FinalizeCleanup is waited for, if asked: first, so that the next
//     steps read the cluster as close as can be to the deletes.
//  2. The ServiceAccount, Role and RoleBinding get an ownerReference to the
//     self object, each only if it is the workload's alone (shared.go).
//  3. With a ClusterRole that is the workload's alone: the
//     ClusterRoleBinding gets an ownerReference to it, and so does the self
//     object when the workload may update it and nothing else owns it.
//  4. With a ClusterRole: it is deleted. If the self object hangs off it,
//     that was the last request: the garbage collector deletes the binding,
//     the self object and, after it, the namespaced RBAC.
//  5. Otherwise the self object is deleted, the last request; its right
//     must not come from the ClusterRole (the chart's comes from the Role,
//     which goes only after the self object).
//
// A step that fails stops the self-cleanup before anything that grants
// rights is deleted, so the workload stays, with the rights to report and
// to try again. Failures are recorded in sum as must-delete failures; the
// error is for configuration problems (wrapping ErrConfig) and discovery
// failures.
func SelfCleanup(ctx context.Context, c *Clients, opts SelfOptions, sum *Summary) error {
	r := &selfRun{c: c, opts: opts, log: logger(opts.Log), sum: sum}
	if opts.DryRun {
		r.dryRun = []string{metav1.DryRunAll}
	}
	t, err := resolveGVR(c.Mapper, opts.GVR)
	if err != nil {
		return fmt.Errorf("self object: %w", err)
	}
	if err := checkSelfScope(t, opts.Namespace); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	r.selfGVR = t.GVR
	r.selfName = opts.ObjectName()
	if !t.Served {
		r.fail(r.selfName, "resource type not served by the API server")
		return nil
	}
	var self *unstructured.Unstructured
	err = retryTransient(ctx, func() (err error) {
		self, err = c.Dynamic.Resource(t.GVR).Namespace(opts.Namespace).Get(ctx, opts.Name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		r.fail(r.selfName, "get: "+err.Error())
		return nil
	}
	selfRef := metav1.OwnerReference{APIVersion: self.GetAPIVersion(), Kind: self.GetKind(), Name: self.GetName(), UID: self.GetUID()}

	// The wait comes before anything is decided: whether another pod runs
	// as the ServiceAccount is read as close as can be to the deletes that
	// act on it.
	if err := r.waitFinalize(ctx); err != nil {
		return err
	}
	saKept := ""
	if opts.Namespace == "" {
		r.log.Warn("self object is cluster-scoped: not adopting the namespaced ServiceAccount, Role and RoleBinding")
	} else {
		saKept = r.adoptNamespaced(ctx, self, selfRef)
	}
	var plan *clusterPlan
	if opts.ClusterRole != "" {
		var ok bool
		if plan, ok = r.prepareCluster(ctx, self, saKept); !ok {
			return nil
		}
	}
	if plan != nil {
		over, ok := r.deleteClusterRole(ctx, plan)
		if over || !ok {
			return nil
		}
	}
	r.deleteSelf(ctx, selfRef.UID)
	return nil
}

// selfRun is one SelfCleanup.
type selfRun struct {
	c        *Clients
	opts     SelfOptions
	log      *slog.Logger
	sum      *Summary
	dryRun   []string
	selfGVR  schema.GroupVersionResource
	selfName string
	// adopted are the namespaced RBAC objects that hang off the self
	// object (step 2): recorded as collected once it goes.
	adopted []string
}

// clusterPlan is what step 3 found and did.
type clusterPlan struct {
	uid types.UID
	// gone: the ClusterRole is already gone (deleted by an earlier attempt
	// or by someone else); there is nothing to delete but the self object.
	gone bool
	// bindingOwned: the ClusterRoleBinding hangs off the ClusterRole.
	bindingOwned bool
	// selfOwned: the self object hangs off the ClusterRole, whose delete is
	// then the last request.
	selfOwned bool
}

func (r *selfRun) record(object string, o Outcome, reason string) {
	r.log.Info("self-cleanup", "object", object, "outcome", string(o), "reason", reason)
	r.sum.Add(Record{Phase: PhaseSelf, Object: object, Outcome: o, Reason: reason})
}

// fail records a failure that fails the run.
func (r *selfRun) fail(object, reason string) {
	r.log.Error("self-cleanup", "object", object, "outcome", string(Failed), "reason", reason)
	r.sum.Add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: reason, MustDelete: true})
}

// collected records an object the garbage collector deletes after owner.
func (r *selfRun) collected(object, owner string) {
	if r.opts.DryRun {
		r.record(object, WouldDelete, "by the garbage collector, after "+owner)
		return
	}
	r.record(object, Collected, "owned by "+owner)
}

func objectName(gr schema.GroupResource, ns, name string) string {
	if ns == "" {
		return gr.String() + " " + name
	}
	return fmt.Sprintf("%s %s/%s", gr, ns, name)
}

// adopt adds owner to the ownerReferences of gvr ns/name. It reports
// whether the reference was added (false: it was there) and how many other
// owners the object has: the garbage collector deletes an object only once
// all its owners are gone. When keep, if given, says why the object is not
// the owner's to take (kept), or that it cannot tell (unknown, which keeps
// it too), nothing is added, and a reference an earlier attempt added is
// taken off again.
func (r *selfRun) adopt(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, owner metav1.OwnerReference,
	keep func(*unstructured.Unstructured) (string, error)) (added bool, others int, kept string, unknown error, err error) {
	ri := r.c.Dynamic.Resource(gvr).Namespace(ns)
	err = retryTransient(ctx, func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			added, others, kept, unknown = false, 0, "", nil
			obj, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			refs := obj.GetOwnerReferences()
			var rest []metav1.OwnerReference
			for _, ref := range refs {
				if ref.UID != owner.UID {
					rest = append(rest, ref)
				}
			}
			others = len(rest)
			if keep != nil {
				if kept, unknown = keep(obj); unknown != nil {
					kept = unknown.Error()
				}
				if kept != "" {
					if len(rest) == len(refs) {
						return nil
					}
					obj.SetOwnerReferences(rest)
					_, err := ri.Update(ctx, obj, metav1.UpdateOptions{DryRun: r.dryRun})
					return err
				}
			}
			if len(rest) < len(refs) {
				return nil
			}
			obj.SetOwnerReferences(append(refs, owner))
			if _, err := ri.Update(ctx, obj, metav1.UpdateOptions{DryRun: r.dryRun}); err != nil {
				return err
			}
			added = true
			return nil
		})
	})
	return added, others, kept, unknown, err
}

// adoptNamespaced is step 2: the ServiceAccount, then the RoleBinding,
// then the Role get an ownerReference to the self object, each only if it
// is the workload's alone (shared.go), since the garbage collector takes
// it after the self object whatever else still uses it. An object kept
// keeps what depends on it: a RoleBinding that grants a kept ServiceAccount
// (another pod may need its rights), a Role that a kept RoleBinding binds.
// It returns why the ServiceAccount is kept, "" when it goes (or is not
// there); the ClusterRoleBinding that grants it follows the same rule. A
// failure is recorded but does not stop the self-cleanup: the object
// outlives the workload, which can still go.
func (r *selfRun) adoptNamespaced(ctx context.Context, self *unstructured.Unstructured, selfRef metav1.OwnerReference) (saKept string) {
	saKept = r.adoptOwn(ctx, serviceAccountGVR, r.opts.ServiceAccount, selfRef, func(sa *unstructured.Unstructured) (string, error) {
		return r.foreignServiceAccount(ctx, sa, self)
	})
	rbKept := r.adoptOwn(ctx, roleBindingGVR, r.opts.RoleBinding, selfRef, func(rb *unstructured.Unstructured) (string, error) {
		return r.foreignRoleBinding(rb, self, saKept)
	})
	r.adoptOwn(ctx, roleGVR, r.opts.Role, selfRef, func(role *unstructured.Unstructured) (string, error) {
		return r.foreignRole(ctx, role, self, rbKept)
	})
	return saKept
}

// adoptOwn adopts one namespaced RBAC object named name, unless keep says
// why not, and records the outcome. It returns why the object stays, ""
// when it goes with the self object or does not exist.
func (r *selfRun) adoptOwn(ctx context.Context, gvr schema.GroupVersionResource, name string, selfRef metav1.OwnerReference,
	keep func(*unstructured.Unstructured) (string, error)) string {
	if name == "" {
		return ""
	}
	object := objectName(gvr.GroupResource(), r.opts.Namespace, name)
	added, _, kept, unknown, err := r.adopt(ctx, gvr, r.opts.Namespace, name, selfRef, keep)
	switch {
	case apierrors.IsNotFound(err):
		r.log.Warn("self-cleanup: RBAC object not found, skipping", "object", object)
		r.record(object, Skipped, "not found")
		return ""
	case err != nil:
		r.log.Error("self-cleanup: cannot set ownerReference", "object", object, "error", err)
		r.sum.Add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: "set ownerReference: " + err.Error()})
		return "cannot set its ownerReference: " + err.Error()
	case unknown != nil:
		// Asked for and not done, for want of a proof: the run does not
		// claim success (exit 1), and the workload still goes.
		r.log.Error("self-cleanup: leaving it in place", "object", object, "reason", kept)
		r.sum.Add(Record{Phase: PhaseSelf, Object: object, Outcome: Failed, Reason: "left in place: " + kept})
		return kept
	case kept != "":
		// spectro-cleanup hands it to the garbage collector all the same.
		r.log.Warn("self-cleanup: leaving it in place", "object", object, "reason", kept)
		r.record(object, Skipped, "left in place: "+kept)
		return kept
	case added && r.opts.DryRun:
		r.log.Info("self-cleanup: ownerReference would be set", "object", object, "owner", r.selfName)
	case added:
		r.log.Info("self-cleanup: ownerReference set", "object", object, "owner", r.selfName)
	default:
		r.log.Info("self-cleanup: ownerReference already present", "object", object, "owner", r.selfName)
	}
	r.adopted = append(r.adopted, object)
	return ""
}

// prepareCluster is step 3. ok is false when it failed (recorded), and then
// nothing may be deleted.
func (r *selfRun) prepareCluster(ctx context.Context, self *unstructured.Unstructured, saKept string) (plan *clusterPlan, ok bool) {
	crName := objectName(clusterRoleGVR.GroupResource(), "", r.opts.ClusterRole)
	crbName := objectName(clusterRoleBindingGVR.GroupResource(), "", r.opts.ClusterRoleBinding)
	plan = &clusterPlan{}
	// A reference to the ClusterRole on the self object means an earlier
	// attempt got as far as step 3 with the self object hanging off it.
	var earlierRef *metav1.OwnerReference
	otherOwners := 0
	for _, ref := range self.GetOwnerReferences() {
		if ref.Kind == "ClusterRole" && ref.Name == r.opts.ClusterRole {
			earlierRef = &ref
		} else {
			otherOwners++
		}
	}

	var cr *unstructured.Unstructured
	err := retryTransient(ctx, func() (err error) {
		cr, err = r.c.Dynamic.Resource(clusterRoleGVR).Get(ctx, r.opts.ClusterRole, metav1.GetOptions{})
		return err
	})
	switch {
	case err == nil:
		plan.uid = cr.GetUID()
	case (apierrors.IsNotFound(err) || apierrors.IsForbidden(err)) && (r.opts.ClusterRoleDeleted || earlierRef != nil):
		// Its own rules granted the read: gone with it.
		r.log.Info("self-cleanup: the ClusterRole was deleted by an earlier attempt", "object", crName, "error", err)
		r.record(crName, Skipped, "deleted by an earlier attempt")
		r.record(crbName, Skipped, "deleted with the ClusterRole by the garbage collector")
		plan.gone, plan.selfOwned = true, earlierRef != nil
		if plan.selfOwned {
			r.selfGone(crName)
		}
		return plan, true
	case apierrors.IsNotFound(err):
		// Someone else deleted it: its binding, if still there, grants
		// nothing any more, so deleting it cannot take away a right the
		// next steps need.
		r.log.Warn("self-cleanup: ClusterRole not found", "object", crName)
		r.record(crName, Skipped, "not found")
		plan.gone = true
		err := retryTransient(ctx, func() error {
			return r.c.Dynamic.Resource(clusterRoleBindingGVR).Delete(ctx, r.opts.ClusterRoleBinding, metav1.DeleteOptions{DryRun: r.dryRun})
		})
		switch {
		case apierrors.IsNotFound(err):
			r.record(crbName, Skipped, "not found")
		case err != nil:
			r.fail(crbName, "delete: "+err.Error())
		case r.opts.DryRun:
			r.record(crbName, WouldDelete, "")
		default:
			r.record(crbName, Deleted, "")
		}
		return plan, true
	default:
		r.fail(crName, "get: "+err.Error())
		return nil, false
	}

	if reason, err := r.foreignClusterRole(ctx, cr, self, saKept); err != nil {
		r.fail(crbName, "get: "+err.Error())
		return nil, false
	} else if reason != "" {
		// spectro-cleanup hands any ClusterRole it is named to the garbage
		// collector; a shared or built-in one is not the workload's to
		// delete.
		r.log.Warn("self-cleanup: leaving the ClusterRole and its binding in place", "object", crName, "reason", reason)
		r.record(crName, Skipped, "left in place: "+reason)
		r.record(crbName, Skipped, "left in place: "+reason)
		return nil, true
	}

	crRef := metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: r.opts.ClusterRole, UID: plan.uid}
	_, others, _, _, err := r.adopt(ctx, clusterRoleBindingGVR, "", r.opts.ClusterRoleBinding, crRef, nil)
	switch {
	case apierrors.IsNotFound(err):
		r.log.Warn("self-cleanup: ClusterRoleBinding not found, skipping", "object", crbName)
		r.record(crbName, Skipped, "not found")
	case err != nil:
		r.fail(crbName, "set ownerReference to the ClusterRole (the workload needs get and update on its ClusterRoleBinding): "+err.Error())
		return nil, false
	default:
		plan.bindingOwned = true
		if others > 0 {
			r.log.Warn("self-cleanup: the ClusterRoleBinding has other owners; the garbage collector deletes it only once they are gone too", "object", crbName)
		}
	}

	// The self object can hang off the ClusterRole only if nothing else
	// owns it (the garbage collector would wait for that owner too) and the
	// workload may update it. Asked first rather than tried, so that a
	// workload without the right makes no refused request.
	switch {
	case otherOwners > 0:
		r.log.Info("self-cleanup: the self object has other owners; deleting it after the ClusterRole", "object", r.selfName)
		return plan, true
	case earlierRef != nil && earlierRef.UID == plan.uid:
		plan.selfOwned = true
		return plan, true
	}
	allowed, err := r.mayUpdateSelf(ctx)
	if err != nil {
		r.log.Warn("self-cleanup: cannot ask whether the workload may update itself; deleting it after the ClusterRole", "object", r.selfName, "error", err)
		return plan, true
	}
	if !allowed {
		r.log.Info("self-cleanup: the workload may not update itself; deleting it after the ClusterRole, with a right that must not come from the ClusterRole",
			"object", r.selfName)
		return plan, true
	}
	if _, _, _, _, err := r.adopt(ctx, r.selfGVR, r.opts.Namespace, r.opts.Name, crRef, nil); err != nil {
		r.fail(r.selfName, "set ownerReference to the ClusterRole: "+err.Error())
		return nil, false
	}
	plan.selfOwned = true
	return plan, true
}

// Helm's ownership annotations: an object created by a release carries both.
const (
	helmReleaseName      = "meta.helm.sh/release-name"
	helmReleaseNamespace = "meta.helm.sh/release-namespace"
)

// foreignClusterRole says why the named ClusterRole (and its binding) is not
// the workload's own to delete, or "" when it is: a Kubernetes default role,
// one another Helm release created, or a binding that grants it to anyone
// but the workload's ServiceAccount, binds another role, or grants a
// ServiceAccount that stays (saKept, why: another pod may need the rights).
func (r *selfRun) foreignClusterRole(ctx context.Context, cr, self *unstructured.Unstructured, saKept string) (string, error) {
	if cr.GetLabels()["kubernetes.io/bootstrapping"] == "rbac-defaults" || strings.HasPrefix(cr.GetName(), "system:") {
		return "a Kubernetes default role", nil
	}
	if reason := otherRelease(cr, self); reason != "" {
		return "the ClusterRole " + reason, nil
	}
	var crb *unstructured.Unstructured
	err := retryTransient(ctx, func() (err error) {
		crb, err = r.c.Dynamic.Resource(clusterRoleBindingGVR).Get(ctx, r.opts.ClusterRoleBinding, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	}
	if reason := otherRelease(crb, self); reason != "" {
		return "the ClusterRoleBinding " + reason, nil
	}
	kind, _, _ := unstructured.NestedString(crb.Object, "roleRef", "kind")
	name, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name")
	if kind != "ClusterRole" || name != r.opts.ClusterRole {
		return fmt.Sprintf("the ClusterRoleBinding binds %s %s", kind, name), nil
	}
	if reason := r.otherSubject(crb); reason != "" {
		return "the ClusterRoleBinding " + reason, nil
	}
	if saKept != "" {
		return fmt.Sprintf("the ClusterRoleBinding grants the ServiceAccount %s, which stays: %s", r.opts.ServiceAccount, saKept), nil
	}
	return "", nil
}

// otherRelease says which other Helm release created obj, if self was
// created by a release too and it is not the same one.
func otherRelease(obj, self *unstructured.Unstructured) string {
	oa, sa := obj.GetAnnotations(), self.GetAnnotations()
	if oa[helmReleaseName] == "" || sa[helmReleaseName] == "" {
		return ""
	}
	if oa[helmReleaseName] != sa[helmReleaseName] || oa[helmReleaseNamespace] != sa[helmReleaseNamespace] {
		return fmt.Sprintf("belongs to the Helm release %s/%s", oa[helmReleaseNamespace], oa[helmReleaseName])
	}
	return ""
}

// mayUpdateSelf asks the API server whether the workload may update its self
// object.
func (r *selfRun) mayUpdateSelf(ctx context.Context) (bool, error) {
	review := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]any{
			"namespace": r.opts.Namespace, "verb": "update", "group": r.selfGVR.Group,
			"version": r.selfGVR.Version, "resource": r.selfGVR.Resource, "name": r.opts.Name,
		}},
	}}
	var res *unstructured.Unstructured
	err := retryTransient(ctx, func() (err error) {
		res, err = r.c.Dynamic.Resource(accessReviewGVR).Create(ctx, review, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("self subject access review: %w", err)
	}
	allowed, _, _ := unstructured.NestedBool(res.Object, "status", "allowed")
	return allowed, nil
}

// waitFinalize is step 1.
func (r *selfRun) waitFinalize(ctx context.Context) error {
	if r.opts.Finalize == nil || r.opts.DryRun {
		return nil
	}
	timeout := r.opts.FinalizeTimeout
	if timeout <= 0 {
		timeout = DefaultFinalizeTimeout
	}
	r.log.Info("waiting for FinalizeCleanup", "timeout", timeout.String())
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-r.opts.Finalize:
		r.log.Info("FinalizeCleanup received")
	case <-timer.C:
		r.log.Info("FinalizeCleanup not received in time, going ahead", "timeout", timeout.String())
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// deleteClusterRole is step 4: over is true when the self object goes with
// the ClusterRole (nothing left to request), ok false when it failed.
func (r *selfRun) deleteClusterRole(ctx context.Context, plan *clusterPlan) (over, ok bool) {
	if plan.gone {
		return plan.selfOwned, true
	}
	crName := objectName(clusterRoleGVR.GroupResource(), "", r.opts.ClusterRole)
	if r.opts.BeforeClusterRoleDelete != nil && !r.opts.DryRun {
		if err := r.opts.BeforeClusterRoleDelete(ctx); err != nil {
			r.fail(crName, "record the deletion: "+err.Error())
			return false, false
		}
	}
	bg := metav1.DeletePropagationBackground
	retried := false
	err := retryTransient(ctx, func() error {
		err := r.c.Dynamic.Resource(clusterRoleGVR).Delete(ctx, r.opts.ClusterRole, metav1.DeleteOptions{
			PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &plan.uid}, DryRun: r.dryRun,
		})
		retried = retried || transient(err)
		return err
	})
	switch {
	case err == nil && r.opts.DryRun:
		r.record(crName, WouldDelete, "")
	case err == nil:
		r.record(crName, Deleted, "")
	case apierrors.IsNotFound(err):
		r.record(crName, Skipped, "already gone")
	case apierrors.IsForbidden(err) && retried:
		// A try that met a connection failure went through: the
		// ClusterRole's own rules, which allowed the delete, are gone.
		r.record(crName, Deleted, "an interrupted request went through")
	default:
		r.fail(crName, "delete: "+err.Error())
		return false, false
	}
	crbName := objectName(clusterRoleBindingGVR.GroupResource(), "", r.opts.ClusterRoleBinding)
	if plan.bindingOwned {
		r.collected(crbName, crName)
	}
	if plan.selfOwned {
		r.selfGone(crName)
	}
	return plan.selfOwned, true
}

// selfGone records the self object's end: collected after owner, or, with
// owner "", deleted; the namespaced RBAC that hangs off it goes after it.
func (r *selfRun) selfGone(owner string) {
	if owner != "" {
		r.collected(r.selfName, owner)
	}
	for _, object := range r.adopted {
		r.collected(object, r.selfName)
	}
}

// deleteSelf is step 5, the last request.
func (r *selfRun) deleteSelf(ctx context.Context, uid types.UID) {
	bg := metav1.DeletePropagationBackground
	retried := false
	err := retryTransient(ctx, func() error {
		err := r.c.Dynamic.Resource(r.selfGVR).Namespace(r.opts.Namespace).Delete(ctx, r.opts.Name, metav1.DeleteOptions{
			PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}, DryRun: r.dryRun,
		})
		retried = retried || transient(err)
		return err
	})
	switch {
	case err == nil && r.opts.DryRun:
		r.record(r.selfName, WouldDelete, "")
	case err == nil:
		r.record(r.selfName, Deleted, "")
	case apierrors.IsNotFound(err) && retried:
		r.record(r.selfName, Deleted, "an interrupted request went through")
	default:
		r.fail(r.selfName, "delete: "+err.Error())
		return
	}
	r.selfGone("")
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
