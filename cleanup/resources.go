package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Defaults of ResourceOptions, spectro-cleanup's where it has one.
const (
	DefaultDeletionInterval = 2 * time.Second
	DefaultDeletionTimeout  = 300 * time.Second
	DefaultConcurrency      = 16
	listPageSize            = 500
	// watchTimeout bounds one watch so that the wait re-lists now and then
	// even if a watch stalls without closing.
	watchTimeout = 60 * time.Second
)

// Clients are the API clients the cleanup needs.
type Clients struct {
	Dynamic dynamic.Interface
	Mapper  Mapper
}

// NewClients builds Clients from cfg; the Mapper reads discovery lazily and
// looks again when a type is not found, so CRDs created a moment ago
// resolve.
func NewClients(cfg *rest.Config) (*Clients, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	mapper, err := newDiscoveryMapper(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Dynamic: dc, Mapper: mapper}, nil
}

// Target is a ResourceEntry resolved through discovery.
type Target struct {
	Entry ResourceEntry
	// Served is false when the API server does not serve the type (e.g. its
	// CRD is already gone); such an entry has nothing left to delete.
	Served bool
	// GVR has the plural resource name from discovery.
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// GroupVersionServed is set, with Served false, when the API server
	// serves the group/version but no resource of that name in it: a typo,
	// or a CRD that was removed while others of its group remain.
	GroupVersionServed bool
	// DidYouMean is the served resource of the group/version the name most
	// likely means, if one is close (see suggestResource); ServedResources
	// are all of them, sorted. Both are set with GroupVersionServed only.
	DidYouMean      string
	ServedResources []string
}

// notServed says why t is not served, with a did-you-mean where the
// group/version is served: for the refusal, the log and the summary.
func (t Target) notServed() string {
	if !t.GroupVersionServed {
		return "resource type not served by the API server"
	}
	s := fmt.Sprintf("%s serves no resource %q", t.GVR.GroupVersion(), t.GVR.Resource)
	if t.DidYouMean != "" {
		return s + fmt.Sprintf(": did you mean %q?", t.DidYouMean)
	}
	return s + "; it serves " + strings.Join(t.ServedResources, ", ")
}

// builtinGroup reports whether group is one of Kubernetes' own that no CRD
// can add resources to: the API server refuses a CRD whose group has no
// dot. Its resources never come and go at run time, so a name it does not
// serve is a mistake, not a CRD already removed.
func builtinGroup(group string) bool {
	return !strings.Contains(group, ".")
}

// Resolve looks every entry up through mapper and checks its namespace
// against the type's scope: a named namespaced entry needs a namespace (an
// empty one would otherwise 404 and pass for success), a cluster-scoped one
// must not have one. A mustDelete entry whose group/version is served but
// whose resource is not is refused too when that is a typo: when a served
// resource is close to its name, or its group is a built-in one. In a CRD's
// group with no close name it stays a skip, like a group not served at all:
// the entry's CRD may be gone already (a run that stopped halfway and is
// run again) while other CRDs keep the group served. These errors wrap
// ErrConfig; discovery failures do not.
func Resolve(mapper Mapper, entries []ResourceEntry) ([]Target, error) {
	targets := make([]Target, 0, len(entries))
	for i, e := range entries {
		t, err := resolveGVR(mapper, schema.GroupVersionResource{Group: e.Group, Version: e.Version, Resource: e.Resource})
		if err != nil {
			return nil, fmt.Errorf("entry %d (%s): %w", i, e, err)
		}
		t.Entry = e
		if !t.Served && t.GroupVersionServed && e.MustDelete && (t.DidYouMean != "" || builtinGroup(e.Group)) {
			return nil, fmt.Errorf("%w: entry %d (%s): %s", ErrConfig, i, e, t.notServed())
		}
		if t.Served {
			switch {
			case t.Namespaced && e.Name != "" && e.Namespace == "":
				return nil, fmt.Errorf("%w: entry %d (%s): %s is namespaced: a named entry needs a namespace", ErrConfig, i, e, t.Kind)
			case !t.Namespaced && e.Namespace != "":
				return nil, fmt.Errorf("%w: entry %d (%s): %s is cluster-scoped: remove the namespace", ErrConfig, i, e, t.Kind)
			}
		}
		targets = append(targets, t)
	}
	return targets, nil
}

func resolveGVR(mapper Mapper, gvr schema.GroupVersionResource) (Target, error) {
	return mapper.Lookup(gvr)
}

// ResourceOptions configures DeleteResources.
type ResourceOptions struct {
	// Blocking waits until deleted objects are gone (finalizers done)
	// before the next entry.
	Blocking bool
	// Interval is the poll period when watching is impossible (no list or
	// watch permission); default DefaultDeletionInterval.
	Interval time.Duration
	// Timeout bounds the wait of one entry; default DefaultDeletionTimeout.
	Timeout time.Duration
	// NoWait checks once, right after the deletes, whether the objects are
	// gone instead of waiting for them (spectro-cleanup's
	// --deletion-timeout-seconds=0): an object still finalizing is a
	// failure.
	NoWait bool
	// Concurrency bounds parallel requests; default DefaultConcurrency.
	Concurrency int
	// DryRun sends server-side dry-run deletes, which check permissions and
	// admission but change nothing.
	DryRun bool
	// Keep are objects left for the self-cleanup: deleting the cleanup
	// workload or its RBAC midway would kill the run or its credentials.
	// Older spectro-cleanup configs list the workload as the last entry.
	Keep []ObjectRef
	Log  *slog.Logger
}

// ObjectRef names one object; Namespace is empty for cluster-scoped ones.
type ObjectRef struct {
	Resource  schema.GroupResource
	Namespace string
	Name      string
}

func (o *ResourceOptions) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultDeletionInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDeletionTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	o.Log = logger(o.Log)
}

// DeleteResources deletes the targets' objects, entry by entry in config
// order (so that, say, custom resources go before their CRD), the objects of
// one entry in parallel, with Background propagation and a UID precondition
// so that an object re-created under the same name is left alone. Outcomes
// go to sum. An entry with mustDelete that fails ends the run: the order is
// the user's dependency order (custom resources stuck on a finalizer must
// not lose their operator or their CRD), so the entries after it are
// recorded as not started. It returns early only when ctx ends.
func DeleteResources(ctx context.Context, dc dynamic.Interface, targets []Target, opts ResourceOptions, sum *Summary) error {
	opts.defaults()
	d := &deleter{dc: dc, opts: opts, sum: sum}
	for i, t := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		before := d.failures()
		d.target(ctx, t)
		if t.Entry.MustDelete && d.failures() > before {
			for _, rest := range targets[i+1:] {
				d.record(rest, rest.Entry.String(), Skipped, "not started: the mustDelete entry "+t.Entry.String()+" failed")
			}
			return ctx.Err()
		}
	}
	return ctx.Err()
}

type deleter struct {
	dc   dynamic.Interface
	opts ResourceOptions
	sum  *Summary

	mu     sync.Mutex
	failed int
}

func (d *deleter) failures() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

type objRef struct {
	namespace, name string
	uid             types.UID
}

func (d *deleter) record(t Target, object string, o Outcome, reason string) {
	r := Record{Phase: PhaseResource, Object: object, Outcome: o, Reason: reason, MustDelete: o == Failed && t.Entry.MustDelete}
	lvl := slog.LevelInfo
	if o == Failed {
		lvl = slog.LevelError
		d.mu.Lock()
		d.failed++
		d.mu.Unlock()
	}
	d.opts.Log.Log(context.Background(), lvl, "resource", "object", object, "outcome", string(o), "reason", reason, "must_delete", t.Entry.MustDelete)
	d.sum.Add(r)
}

func objName(t Target, ref objRef) string {
	gr := t.GVR.GroupResource().String()
	if ref.namespace != "" {
		return gr + " " + ref.namespace + "/" + ref.name
	}
	return gr + " " + ref.name
}

func (d *deleter) target(ctx context.Context, t Target) {
	e := t.Entry
	if !t.Served {
		if t.GroupVersionServed {
			// Not an error, but most likely a typo: say so louder than a
			// skip.
			d.opts.Log.Warn("entry names a resource its group/version does not serve: a typo, or a CRD already removed",
				"entry", e.String(), "did_you_mean", t.DidYouMean, "served", t.ServedResources)
		}
		d.record(t, e.String(), Skipped, t.notServed())
		return
	}
	ri := d.resourceInterface(t, e.Namespace)
	var (
		refs   []objRef
		rv     string
		wopts  metav1.ListOptions
		lister = ri
	)
	if e.Name != "" {
		var obj *unstructured.Unstructured
		err := retryTransient(ctx, func() (err error) {
			obj, err = ri.Get(ctx, e.Name, metav1.GetOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			d.record(t, objName(t, objRef{namespace: e.Namespace, name: e.Name}), Skipped, "not found")
			return
		}
		if apierrors.IsForbidden(err) {
			// spectro-cleanup only deletes, so RBAC made for it may
			// grant delete alone: "cannot read" must not become
			// "nothing to do".
			d.deleteUnread(ctx, t)
			return
		}
		if err != nil {
			d.record(t, objName(t, objRef{namespace: e.Namespace, name: e.Name}), Failed, "get: "+err.Error())
			return
		}
		refs = []objRef{{namespace: obj.GetNamespace(), name: obj.GetName(), uid: obj.GetUID()}}
		rv = obj.GetResourceVersion()
		wopts.FieldSelector = fields.OneTermEqualSelector("metadata.name", e.Name).String()
	} else {
		wopts.LabelSelector = e.LabelSelector
		err := retryTransient(ctx, func() (err error) {
			refs, rv, err = listAll(ctx, lister, wopts)
			return err
		})
		if err != nil {
			d.record(t, e.String(), Failed, "list: "+err.Error())
			return
		}
		if len(refs) == 0 {
			d.record(t, e.String(), Skipped, "no objects")
			return
		}
	}

	refs = d.withoutKept(t, refs)
	if len(refs) == 0 {
		return
	}
	pending := d.deleteAll(ctx, t, refs)
	if len(pending) == 0 {
		return
	}
	if d.opts.Blocking && !d.opts.DryRun {
		if d.opts.NoWait {
			reason := "still present right after the delete (no wait: --deletion-timeout-seconds=0)"
			if err := d.checkGone(ctx, t, pending, d.getGone); err != nil {
				reason = "cannot check it is gone: " + err.Error()
			}
			for _, ref := range sortedRefs(pending) {
				d.record(t, objName(t, ref), Failed, reason)
			}
			return
		}
		d.waitGone(ctx, t, lister, wopts, rv, pending)
		for _, ref := range sortedRefs(pending) {
			d.record(t, objName(t, ref), Failed, fmt.Sprintf("still present after %s", d.opts.Timeout))
		}
		return
	}
	for _, ref := range sortedRefs(pending) {
		if d.opts.DryRun {
			d.record(t, objName(t, ref), WouldDelete, "")
		} else {
			d.record(t, objName(t, ref), Deleted, "deletion requested")
		}
	}
}

func (d *deleter) withoutKept(t Target, refs []objRef) []objRef {
	if len(d.opts.Keep) == 0 {
		return refs
	}
	out := refs[:0:0]
	for _, r := range refs {
		kept := false
		for _, k := range d.opts.Keep {
			if k.Resource == t.GVR.GroupResource() && k.Namespace == r.namespace && k.Name == r.name {
				kept = true
				break
			}
		}
		if kept {
			d.record(t, objName(t, r), Skipped, "left to the self-cleanup")
			continue
		}
		out = append(out, r)
	}
	return out
}

func (d *deleter) resourceInterface(t Target, namespace string) dynamic.ResourceInterface {
	nri := d.dc.Resource(t.GVR)
	if t.Namespaced && namespace != "" {
		return nri.Namespace(namespace)
	}
	return nri
}

// listAll lists every object, page by page; all pages come from one
// snapshot, whose resourceVersion it returns for a watch to continue from.
func listAll(ctx context.Context, ri dynamic.ResourceInterface, opts metav1.ListOptions) ([]objRef, string, error) {
	opts.Limit = listPageSize
	var (
		refs []objRef
		rv   string
	)
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		if rv == "" {
			rv = list.GetResourceVersion()
		}
		for i := range list.Items {
			o := &list.Items[i]
			refs = append(refs, objRef{namespace: o.GetNamespace(), name: o.GetName(), uid: o.GetUID()})
		}
		opts.Continue = list.GetContinue()
		if opts.Continue == "" {
			return refs, rv, nil
		}
	}
}

// deleteAll issues the deletes with bounded parallelism and returns the
// objects whose delete was accepted (which may still exist, finalizing).
func (d *deleter) deleteAll(ctx context.Context, t Target, refs []objRef) map[types.UID]objRef {
	var (
		mu      sync.Mutex
		pending = map[types.UID]objRef{}
		wg      sync.WaitGroup
		sem     = make(chan struct{}, d.opts.Concurrency)
	)
	bg := metav1.DeletePropagationBackground
	for _, ref := range refs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			uid := ref.uid
			opts := metav1.DeleteOptions{
				PropagationPolicy: &bg,
				Preconditions:     &metav1.Preconditions{UID: &uid},
			}
			if d.opts.DryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			// The UID precondition makes a repeated delete safe: if the
			// first one went through before the connection broke, the
			// retry finds the object gone.
			err := retryTransient(ctx, func() error {
				return d.resourceInterface(t, ref.namespace).Delete(ctx, ref.name, opts)
			})
			switch {
			case err == nil:
				mu.Lock()
				pending[ref.uid] = ref
				mu.Unlock()
			case apierrors.IsNotFound(err):
				d.record(t, objName(t, ref), Skipped, "already gone")
			case apierrors.IsConflict(err):
				d.record(t, objName(t, ref), Skipped, "replaced by a new object of the same name")
			default:
				d.record(t, objName(t, ref), Failed, "delete: "+err.Error())
			}
		})
	}
	wg.Wait()
	return pending
}

// waitGone removes objects from pending as they disappear, until none is
// left or the timeout passes. It watches from rv (the snapshot the objects
// were listed or read at, so no deletion event can be missed), re-listing
// whenever a watch ends; without list or watch permission it falls back to
// polling each object every Interval.
func (d *deleter) waitGone(ctx context.Context, t Target, ri dynamic.ResourceInterface, opts metav1.ListOptions, rv string, pending map[types.UID]objRef) {
	total := len(pending)
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	for len(pending) > 0 && ctx.Err() == nil {
		if rv == "" {
			refs, listRV, err := listAll(ctx, ri, opts)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				if cannotWatch(err) {
					d.opts.Log.Debug("cannot list, polling instead", "gvr", t.GVR.String(), "error", err)
					d.pollGone(ctx, t, pending, d.getGone)
					break
				}
				d.opts.Log.Debug("list failed, retrying", "gvr", t.GVR.String(), "error", err)
				sleep(ctx, d.opts.Interval)
				continue
			}
			present := map[types.UID]bool{}
			for _, r := range refs {
				present[r.uid] = true
			}
			for uid := range pending {
				if !present[uid] {
					d.gone(t, pending, uid)
				}
			}
			rv = listRV
			continue
		}
		wo := opts
		wo.ResourceVersion = rv
		wo.AllowWatchBookmarks = true
		secs := int64(watchTimeout / time.Second)
		wo.TimeoutSeconds = &secs
		w, err := ri.Watch(ctx, wo)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if cannotWatch(err) {
				d.opts.Log.Debug("cannot watch, polling instead", "gvr", t.GVR.String(), "error", err)
				d.pollGone(ctx, t, pending, d.getGone)
				break
			}
			d.opts.Log.Debug("watch failed, re-listing", "gvr", t.GVR.String(), "error", err)
			rv = ""
			sleep(ctx, d.opts.Interval)
			continue
		}
		d.consume(ctx, t, w, pending)
		w.Stop()
		rv = "" // re-list: the watch ended or its resourceVersion expired
	}
	d.opts.Log.Debug("wait done", "gvr", t.GVR.String(), "objects", total, "remaining", len(pending))
}

func (d *deleter) consume(ctx context.Context, t Target, w watch.Interface, pending map[types.UID]objRef) {
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Error:
				return
			case watch.Deleted:
				if o, ok := ev.Object.(*unstructured.Unstructured); ok {
					if _, ok := pending[o.GetUID()]; ok {
						d.gone(t, pending, o.GetUID())
					}
				}
			}
		}
	}
}

// goneFunc reports whether the object ref (uid, when known) is gone; an
// error means it cannot tell.
type goneFunc func(ctx context.Context, t Target, ref objRef) (bool, error)

// getGone asks with a GET: gone when not found or replaced.
func (d *deleter) getGone(ctx context.Context, t Target, ref objRef) (bool, error) {
	obj, err := d.resourceInterface(t, ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return obj.GetUID() != ref.uid, nil
}

// dryRunGone asks with a server-side dry-run DELETE, which needs only the
// delete right the object was deleted with: not found means gone.
func (d *deleter) dryRunGone(ctx context.Context, t Target, ref objRef) (bool, error) {
	opts := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	if ref.uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &ref.uid}
	}
	err := d.resourceInterface(t, ref.namespace).Delete(ctx, ref.name, opts)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err) && ref.uid != "":
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// checkGone asks once about every pending object and drops the gone ones;
// it returns the last error of an object it could not ask about.
func (d *deleter) checkGone(ctx context.Context, t Target, pending map[types.UID]objRef, isGone goneFunc) error {
	var (
		mu      sync.Mutex
		gone    []types.UID
		lastErr error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, d.opts.Concurrency)
	)
	for uid, ref := range pending {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ok, err := isGone(ctx, t, ref)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				lastErr = err
			case ok:
				gone = append(gone, uid)
			}
		})
	}
	wg.Wait()
	for _, uid := range gone {
		d.gone(t, pending, uid)
	}
	return lastErr
}

// pollGone is the fallback of waitGone: checkGone every Interval until
// nothing is pending or ctx ends.
func (d *deleter) pollGone(ctx context.Context, t Target, pending map[types.UID]objRef, isGone goneFunc) {
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	for {
		_ = d.checkGone(ctx, t, pending, isGone)
		if len(pending) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitUnread polls with dry-run deletes until the object is gone, ctx ends
// (nil: still present), or a check fails in a way retrying will not cure.
func (d *deleter) waitUnread(ctx context.Context, t Target, pending map[types.UID]objRef) error {
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	for {
		err := d.checkGone(ctx, t, pending, d.dryRunGone)
		if len(pending) == 0 {
			return nil
		}
		if err != nil && ctx.Err() == nil && !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// deleteUnread deletes the named entry of t without having read it (the GET
// was forbidden): no UID precondition, and, when blocking, the wait asks
// with dry-run deletes. An object that cannot be checked is a failure only
// for a mustDelete entry: its delete was accepted.
func (d *deleter) deleteUnread(ctx context.Context, t Target) {
	e := t.Entry
	ref := objRef{namespace: e.Namespace, name: e.Name}
	name := objName(t, ref)
	if refs := d.withoutKept(t, []objRef{ref}); len(refs) == 0 {
		return
	}
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if d.opts.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	retried := false
	err := retryTransient(ctx, func() error {
		err := d.resourceInterface(t, ref.namespace).Delete(ctx, ref.name, opts)
		retried = retried || transient(err)
		return err
	})
	switch {
	case apierrors.IsNotFound(err) && retried:
		d.record(t, name, Deleted, "an interrupted request went through")
		return
	case apierrors.IsNotFound(err):
		d.record(t, name, Skipped, "not found")
		return
	case err != nil:
		d.record(t, name, Failed, "delete (get forbidden, deleted unread): "+err.Error())
		return
	case d.opts.DryRun:
		d.record(t, name, WouldDelete, "get forbidden: deleted unread")
		return
	case !d.opts.Blocking:
		d.record(t, name, Deleted, "deletion requested (get forbidden)")
		return
	}
	pending := map[types.UID]objRef{"": ref}
	var checkErr error
	if d.opts.NoWait {
		checkErr = d.checkGone(ctx, t, pending, d.dryRunGone)
	} else {
		wctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
		checkErr = d.waitUnread(wctx, t, pending)
		cancel()
	}
	switch {
	case len(pending) == 0:
	case checkErr != nil && !e.MustDelete:
		d.record(t, name, Deleted, "deletion requested; cannot check it is gone (get forbidden): "+checkErr.Error())
	case checkErr != nil:
		d.record(t, name, Failed, "deletion requested; cannot check it is gone (get forbidden): "+checkErr.Error())
	case d.opts.NoWait:
		d.record(t, name, Failed, "still present right after the delete (no wait: --deletion-timeout-seconds=0)")
	default:
		d.record(t, name, Failed, fmt.Sprintf("still present after %s", d.opts.Timeout))
	}
}

func (d *deleter) gone(t Target, pending map[types.UID]objRef, uid types.UID) {
	ref := pending[uid]
	delete(pending, uid)
	d.record(t, objName(t, ref), Deleted, "")
}

func sortedRefs(m map[types.UID]objRef) []objRef {
	refs := make([]objRef, 0, len(m))
	for _, r := range m {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].namespace != refs[j].namespace {
			return refs[i].namespace < refs[j].namespace
		}
		return refs[i].name < refs[j].name
	})
	return refs
}

// ParseGVR parses "group/version/resource"; the group is empty for the core
// group ("/v1/pods").
func ParseGVR(s string) (schema.GroupVersionResource, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return schema.GroupVersionResource{}, fmt.Errorf("%w: %q is not group/version/resource (\"/v1/pods\" for the core group)", ErrConfig, s)
	}
	return schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}, nil
}

// retryTransient runs fn again while it fails with an error that a later
// attempt may not get. Without it, a cleanup that meets an API server
// restart records failures and leaves objects behind for the Job's next
// pod to find. The retries of one request span up to TransientRetryFor:
// long enough to ride out a restart of the API server on a loaded node
// (a fixed 20 s was not, on two busy cores), short enough that a cleanup
// against a server that stays away still ends and reports.
func retryTransient(ctx context.Context, fn func() error) error {
	// Not wait.Backoff: its Cap ends the retries (Steps = 0) once the delay
	// reaches it, about 11 s into them, whatever Steps says.
	deadline := time.Now().Add(TransientRetryFor)
	delay := 200 * time.Millisecond
	for {
		err := fn()
		if err == nil || !transient(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait.Jitter(delay, 0.2))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// TransientRetryFor bounds the retries of one request that fails for the
// connection or an overloaded or restarting API server: long enough to ride
// out an API server restart on a loaded node.
const TransientRetryFor = 2 * time.Minute

// transient reports errors of the connection or of an overloaded or
// restarting server, as opposed to answers about the request.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// cannotWatch reports errors that retrying a list or watch will not cure.
func cannotWatch(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsUnauthorized(err)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
