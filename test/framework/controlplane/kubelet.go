package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A kubelet does two things for its Node that sweepd checks: it registers the
// Node with its boot ID (RegisterNode) and it renews the Node's Lease in
// kube-node-lease for as long as it lives. sweepd counts its API view as this
// node's only while it sees that Lease renewed: a Node whose Lease stands still
// is a Node whose kubelet is gone. The control plane here has no kubelet, so
// RegisterNode starts a fake one that does the second thing, and StopKubelet
// kills it.

const (
	// KubeletLeaseDuration is the spec.leaseDurationSeconds of the Leases that
	// the fake kubelets renew: a Lease not renewed for that long is expired.
	// It is the shortest a kubelet allows, so that tests of a dead kubelet
	// wait little.
	KubeletLeaseDuration = 10 * time.Second
	// KubeletRenewInterval is how often a fake kubelet renews its Lease
	// (spec.renewTime), much more often than a kubelet (a quarter of the
	// duration), so that a reader sees a renewal within a second.
	KubeletRenewInterval = 500 * time.Millisecond
	// kubeletRequestTimeout bounds each request of a renewal, so that an API
	// server that hangs delays the next renewal rather than ending them.
	kubeletRequestTimeout = 5 * time.Second
)

// servers ties each fake kubelet to the control plane whose API server it
// renews its Lease on, by the API server's host ("127.0.0.1:port").
// RegisterNode has only a clientset, whose host finds the control plane; Stop
// removes its control plane's entry and ends its kubelets before its API
// server, so that none outlives the test, or renews on a later control plane
// that reuses the port.
var servers = struct {
	sync.Mutex
	byHost map[string]*server
}{byHost: map[string]*server{}}

// server is a running control plane's fake kubelets.
type server struct {
	cp *ControlPlane
	// cs is the kubelets' own client: a test's client limiter (or its
	// BenchmarkHundredDaemons, 100 nodes) must not slow down renewals, nor
	// renewals the test, and the audit log tells them apart by user agent.
	cs       kubernetes.Interface
	kubelets map[string]*fakeKubelet // by node name
}

// fakeKubelet renews one node's Lease until cancel is called; done is closed
// when it no longer does.
type fakeKubelet struct {
	cs    kubernetes.Interface
	name  string
	lease *coordinationv1.Lease // the last written, for the next update
	// every is how often it renews the Lease, duration the Lease's
	// duration: KubeletRenewInterval and KubeletLeaseDuration unless
	// RestartKubelet set others.
	every, duration time.Duration
	cancel          context.CancelFunc
	done            chan struct{}
}

// registerKubelets makes RegisterNode's kubelets possible on cp's API server,
// once cp.Config is set.
func (cp *ControlPlane) registerKubelets() error {
	cfg := rest.CopyConfig(cp.Config)
	cfg.UserAgent = "sweep-fake-kubelet"
	cfg.QPS = -1 // no client-side limit
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("fake kubelet client: %w", err)
	}
	host, err := apiHost(cs)
	if err != nil {
		return err
	}
	servers.Lock()
	defer servers.Unlock()
	servers.byHost[host] = &server{cp: cp, cs: cs, kubelets: map[string]*fakeKubelet{}}
	return nil
}

// stopKubelets ends every fake kubelet on cp's API server and forgets it.
func (cp *ControlPlane) stopKubelets() {
	servers.Lock()
	var ks []*fakeKubelet
	for host, s := range servers.byHost {
		if s.cp != cp {
			continue
		}
		for _, k := range s.kubelets {
			ks = append(ks, k)
		}
		delete(servers.byHost, host)
	}
	servers.Unlock()
	for _, k := range ks {
		k.cancel()
	}
	for _, k := range ks {
		<-k.done
	}
}

// apiHost returns the host of the API server that cs talks to.
func apiHost(cs kubernetes.Interface) (string, error) {
	rc, ok := cs.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return "", fmt.Errorf("clientset %T has no REST client to find its API server by", cs)
	}
	return rc.Get().URL().Host, nil
}

// startKubelet starts the fake kubelet of node name on the API server of cs,
// unless it runs already. It has created or renewed the Lease when it
// returns.
func startKubelet(ctx context.Context, cs kubernetes.Interface, name string) error {
	return startKubeletEvery(ctx, cs, name, KubeletRenewInterval, KubeletLeaseDuration)
}

// RestartKubelet stops the fake kubelet of the Node name on the API server
// of cs, if one runs, and starts it again renewing a Lease of duration
// every `every`: a kubelet's defaults are a 40s Lease renewed every 10s,
// which the fake kubelets' shorter figures spare most tests the wait for.
// It has renewed the Lease when it returns.
func RestartKubelet(ctx context.Context, cs kubernetes.Interface, name string, every, duration time.Duration) error {
	if _, err := stopKubelet(cs, name); err != nil {
		return err
	}
	return startKubeletEvery(ctx, cs, name, every, duration)
}

func startKubeletEvery(ctx context.Context, cs kubernetes.Interface, name string, every, duration time.Duration) error {
	host, err := apiHost(cs)
	if err != nil {
		return err
	}
	servers.Lock()
	s := servers.byHost[host]
	running := s != nil && s.kubelets[name] != nil
	servers.Unlock()
	if s == nil {
		return fmt.Errorf("no running control plane serves %s, to renew the Lease of node %s on", host, name)
	}
	if running {
		return nil
	}
	k := &fakeKubelet{cs: s.cs, name: name, every: every, duration: duration, done: make(chan struct{})}
	if err := k.renew(ctx); err != nil {
		return err
	}
	servers.Lock()
	defer servers.Unlock()
	if servers.byHost[host] != s || s.kubelets[name] != nil {
		// Stopped meanwhile, or started by another RegisterNode.
		return nil
	}
	var kctx context.Context
	kctx, k.cancel = context.WithCancel(context.Background())
	s.kubelets[name] = k
	go k.run(kctx)
	return nil
}

// StopKubelet stops the fake kubelet that RegisterNode started for the Node
// name on the API server of cs, and waits until it renews no more. The Lease
// stays as it was last renewed, as a kubelet that died leaves it, so that
// tests can check what sweepd makes of a Node whose kubelet is gone.
// RegisterNode starts the kubelet again. It is an error when none runs.
func StopKubelet(cs kubernetes.Interface, name string) error {
	stopped, err := stopKubelet(cs, name)
	if err == nil && !stopped {
		host, _ := apiHost(cs)
		return fmt.Errorf("no fake kubelet of node %s runs on %s", name, host)
	}
	return err
}

// stopKubelet is StopKubelet, which says whether one ran.
func stopKubelet(cs kubernetes.Interface, name string) (bool, error) {
	host, err := apiHost(cs)
	if err != nil {
		return false, err
	}
	servers.Lock()
	var k *fakeKubelet
	if s := servers.byHost[host]; s != nil {
		k = s.kubelets[name]
		delete(s.kubelets, name)
	}
	servers.Unlock()
	if k == nil {
		return false, nil
	}
	k.cancel()
	<-k.done
	return true, nil
}

// run renews the Lease every KubeletRenewInterval until ctx ends. A failed
// renewal is tried again at the next tick, as a kubelet does: fault tests
// stop the API server and start it again, and the Lease must then be renewed
// again without the test registering the Node anew.
func (k *fakeKubelet) run(ctx context.Context) {
	defer close(k.done)
	tick := time.NewTicker(k.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, kubeletRequestTimeout)
		_ = k.renew(rctx)
		cancel()
	}
}

// renew writes the Lease with a new renewTime, creating it (and its
// namespace) when it is missing. Like a kubelet, it writes its own holder and
// duration over whatever else is there.
func (k *fakeKubelet) renew(ctx context.Context) error {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if k.lease != nil {
		if l, err := leases.Update(ctx, k.spec(k.lease.DeepCopy()), metav1.UpdateOptions{}); err == nil {
			k.lease = l
			return nil
		}
		// Changed or deleted by someone else, or the API server is away.
		k.lease = nil
	}
	l, err := leases.Get(ctx, k.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l, err = k.create(ctx)
	case err == nil:
		l, err = leases.Update(ctx, k.spec(l), metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renew lease %s/%s: %w", corev1.NamespaceNodeLease, k.name, err)
	}
	k.lease = l
	return nil
}

// create creates the Lease. kube-apiserver creates kube-node-lease itself,
// but in a controller that may not have run yet when it is first ready, so
// create makes the namespace when the API server says it is missing.
func (k *fakeKubelet) create(ctx context.Context) (*coordinationv1.Lease, error) {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l := k.spec(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: corev1.NamespaceNodeLease}})
	created, err := leases.Create(ctx, l, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		return created, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}
	if _, err := k.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", corev1.NamespaceNodeLease, err)
	}
	return leases.Create(ctx, l, metav1.CreateOptions{})
}

// spec sets l's spec as the kubelet of node k.name renewing it now.
func (k *fakeKubelet) spec(l *coordinationv1.Lease) *coordinationv1.Lease {
	holder, seconds := k.name, int32(k.duration/time.Second)
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &now
	return l
}
