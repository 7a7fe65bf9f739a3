// Package eagerproxy is a test proxy between one workload and the API
// server that makes each of the workload's deletions take its whole effect
// before the workload's next request goes through: the garbage collector has
// removed what the deletion left without an owner, the RBAC authorizer
// answers as the remaining roles and bindings say, and a removed
// ServiceAccount's token is refused. A real cluster may be that fast, or
// slower; an order of requests that works only while the cluster is slower
// (a delete whose right comes from what an earlier delete removed) fails
// here every time instead of now and then.
package eagerproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Object names one API object.
type Object struct {
	GVR             schema.GroupVersionResource
	Namespace, Name string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.GVR.Resource + "/" + o.Name
	}
	return o.GVR.Resource + "/" + o.Namespace + "/" + o.Name
}

// Grant is where some of the workload's rights come from: a Role and its
// RoleBinding, or a ClusterRole and its ClusterRoleBinding.
type Grant struct {
	Role, Binding Object
}

// Options configures Start.
type Options struct {
	// Upstream is an admin configuration of the API server: its address
	// and TLS settings carry the workload's requests (with the workload's
	// own credentials), its credentials the proxy's checks.
	Upstream *rest.Config
	// ServiceAccount is the workload's identity.
	ServiceAccount Object
	// Tracked are the objects whose garbage collection a deletion may
	// start (the workload and its RBAC).
	Tracked []Object
	// Grants are where the workload's rights come from.
	Grants []Grant
	// Timeout bounds how long one deletion may take to take effect;
	// default 60 s.
	Timeout time.Duration
}

// Request is one request of the workload, as the proxy answered it.
type Request struct {
	Method, Path string
	Code         int
	At           time.Time
}

func (r Request) String() string { return fmt.Sprintf("%s %s: %d", r.Method, r.Path, r.Code) }

// Proxy is a running proxy; Start makes one.
type Proxy struct {
	o      Options
	srv    *httptest.Server
	cs     kubernetes.Interface
	dc     dynamic.Interface
	anon   http.RoundTripper
	user   string
	groups []string
	probes []probe
	rules  map[Object][]rbacv1.PolicyRule
	gate   sync.RWMutex // held by a write until its deletion took effect
	mu     sync.Mutex
	reqs   []Request
	errs   []error
	token  string
	known  map[Object]types.UID // of the tracked objects, as last seen
}

// probe is one right a Grant gives, asked with a SubjectAccessReview.
type probe struct {
	attrs authorizationv1.ResourceAttributes
}

// Start starts a proxy for the workload; it stops when the test ends.
func Start(t testing.TB, o Options) *Proxy {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	for _, g := range o.Grants {
		o.Tracked = append(o.Tracked, g.Role, g.Binding)
	}
	o.Tracked = append(o.Tracked, o.ServiceAccount)
	slices.SortFunc(o.Tracked, func(a, b Object) int { return strings.Compare(a.String(), b.String()) })
	o.Tracked = slices.Compact(o.Tracked)
	p := &Proxy{
		o: o, known: map[Object]types.UID{}, rules: map[Object][]rbacv1.PolicyRule{},
		user:   "system:serviceaccount:" + o.ServiceAccount.Namespace + ":" + o.ServiceAccount.Name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + o.ServiceAccount.Namespace, "system:authenticated"},
	}
	var err error
	if p.cs, err = kubernetes.NewForConfig(o.Upstream); err != nil {
		t.Fatal(err)
	}
	if p.dc, err = dynamic.NewForConfig(o.Upstream); err != nil {
		t.Fatal(err)
	}
	if p.anon, err = rest.TransportFor(rest.AnonymousClientConfig(o.Upstream)); err != nil {
		t.Fatal(err)
	}
	// The probes: one per rule of each granting role, as the rule is
	// written (its first verb, group, resource and name).
	for _, g := range o.Grants {
		rules, err := p.readRules(t.Context(), g.Role)
		if err != nil {
			t.Fatalf("eagerproxy: rules of %s: %v", g.Role, err)
		}
		p.rules[g.Role] = rules
		for _, r := range rules {
			a := authorizationv1.ResourceAttributes{Namespace: g.Role.Namespace, Verb: first(r.Verbs), Group: first(r.APIGroups), Resource: first(r.Resources), Name: first(r.ResourceNames)}
			if !slices.ContainsFunc(p.probes, func(q probe) bool { return q.attrs == a }) {
				p.probes = append(p.probes, probe{attrs: a})
			}
		}
	}
	s, err := p.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range o.Tracked {
		if s.present[o] == nil {
			t.Fatalf("eagerproxy: %s does not exist", o)
		}
	}
	upstream, err := url.Parse(o.Upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport:     p.anon,
		FlushInterval: -1, // watches stream
	}
	// TLS: clientcmd reads no credentials from a kubeconfig for a plain
	// HTTP server.
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, rp)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// Config is a client configuration that sends token's requests through the
// proxy.
func (p *Proxy) Config(token string) *rest.Config {
	return &rest.Config{Host: p.srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
}

// Requests returns the workload's requests so far, in the order answered.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

// Errors returns the deletions that did not take their effect in time:
// then the proxy let the next request through anyway.
func (p *Proxy) Errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// recorder keeps the status code of a response.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController flush a watch through the recorder.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	switch {
	case write:
		// One write at a time, and none while a deletion takes effect.
		p.gate.Lock()
		defer p.gate.Unlock()
	case !watch:
		// Reads are authorized too: they wait for a deletion to take
		// effect. A watch, which lasts, does not hold the gate.
		p.gate.RLock()
		defer p.gate.RUnlock()
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		p.mu.Lock()
		p.token = tok
		p.mu.Unlock()
	}
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	rp.ServeHTTP(rec, r)
	p.mu.Lock()
	p.reqs = append(p.reqs, Request{Method: r.Method, Path: r.URL.Path, Code: rec.code, At: time.Now()})
	p.mu.Unlock()
	if r.Method == http.MethodDelete && rec.code < 300 {
		if err := p.settle(r.Context()); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("after DELETE %s: %w", r.URL.Path, err))
			p.mu.Unlock()
		}
	}
}

// state is what the tracked objects look like now.
type state struct {
	present map[Object]*metav1.ObjectMeta
}

func (p *Proxy) read(ctx context.Context) (state, error) {
	s := state{present: map[Object]*metav1.ObjectMeta{}}
	for _, o := range p.o.Tracked {
		u, err := p.dc.Resource(o.GVR).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return s, err
		default:
			m := &metav1.ObjectMeta{UID: u.GetUID(), OwnerReferences: u.GetOwnerReferences(), DeletionTimestamp: u.GetDeletionTimestamp()}
			s.present[o] = m
			p.mu.Lock()
			p.known[o] = m.UID
			p.mu.Unlock()
		}
	}
	return s, nil
}

// doomed lists the present tracked objects that are being deleted or whose
// owners are all gone or doomed: the garbage collector deletes them.
func (p *Proxy) doomed(s state) []Object {
	dead := map[types.UID]bool{}
	p.mu.Lock()
	for o, uid := range p.known {
		if s.present[o] == nil {
			dead[uid] = true
		}
	}
	p.mu.Unlock()
	var out []Object
	for changed := true; changed; {
		changed = false
		for _, o := range p.o.Tracked {
			m := s.present[o]
			if m == nil || dead[m.UID] {
				continue
			}
			orphan := len(m.OwnerReferences) > 0 && !slices.ContainsFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return !dead[r.UID] })
			if m.DeletionTimestamp != nil || orphan {
				dead[m.UID] = true
				out = append(out, o)
				changed = true
			}
		}
	}
	return out
}

// settle waits until a deletion took its whole effect.
func (p *Proxy) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.Timeout)
	defer cancel()
	// The garbage collector: every doomed tracked object gone.
	var s state
	for {
		var err error
		if s, err = p.read(ctx); err == nil {
			d := p.doomed(s)
			if len(d) == 0 {
				break
			}
			err = fmt.Errorf("waiting for the garbage collector: %v", d)
		}
		if !sleep(ctx) {
			return err
		}
	}
	// The authorizer: every probe answered as the remaining grants say.
	saGone := s.present[p.o.ServiceAccount] == nil
	for {
		err := p.authorizerAgrees(ctx, s, saGone)
		if err == nil {
			break
		}
		if !sleep(ctx) {
			return err
		}
	}
	if !saGone {
		return nil
	}
	// The authenticator: the token of a removed ServiceAccount refused.
	for {
		code, err := p.tokenCheck(ctx)
		if err == nil && code == http.StatusUnauthorized {
			return nil
		}
		if !sleep(ctx) {
			if err != nil {
				return fmt.Errorf("the token of removed %s: %w", p.o.ServiceAccount, err)
			}
			return fmt.Errorf("the token of removed %s still accepted (status %d)", p.o.ServiceAccount, code)
		}
	}
}

func sleep(ctx context.Context) bool {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// authorizerAgrees checks every probe against what the grants that are
// still there allow. A SubjectAccessReview does not look at the
// ServiceAccount: without it, the token check is what counts.
func (p *Proxy) authorizerAgrees(ctx context.Context, s state, saGone bool) error {
	if saGone {
		return nil
	}
	for _, pr := range p.probes {
		want := false
		for _, g := range p.o.Grants {
			if s.present[g.Role] != nil && s.present[g.Binding] != nil && covers(g.Role.Namespace, p.rules[g.Role], pr.attrs) {
				want = true
			}
		}
		a := pr.attrs
		res, err := p.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: p.user, Groups: p.groups, ResourceAttributes: &a},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if res.Status.Allowed != want {
			return fmt.Errorf("the authorizer says %v to %+v, the remaining grants %v", res.Status.Allowed, a, want)
		}
	}
	return nil
}

// readRules reads a Role's or ClusterRole's rules.
func (p *Proxy) readRules(ctx context.Context, role Object) ([]rbacv1.PolicyRule, error) {
	if role.Namespace == "" {
		cr, err := p.cs.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return cr.Rules, nil
	}
	r, err := p.cs.RbacV1().Roles(role.Namespace).Get(ctx, role.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return r.Rules, nil
}

// covers reports whether rules of a role in namespace ns ("" for a
// ClusterRole, which its ClusterRoleBinding grants everywhere) allow a.
func covers(ns string, rules []rbacv1.PolicyRule, a authorizationv1.ResourceAttributes) bool {
	if ns != "" && a.Namespace != ns {
		return false
	}
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range rules {
		if has(r.Verbs, a.Verb) && has(r.APIGroups, a.Group) && has(r.Resources, a.Resource) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name)) {
			return true
		}
	}
	return false
}

// tokenCheck sends the workload's last token to the API server and returns
// the status code.
func (p *Proxy) tokenCheck(ctx context.Context) (int, error) {
	p.mu.Lock()
	tok := p.token
	p.mu.Unlock()
	body := strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.o.Upstream.Host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.anon.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
