// Package controlplane runs a real Kubernetes control plane (etcd,
// kube-apiserver and optionally kube-controller-manager and kube-scheduler) on
// loopback for tests, and a real node beside it (StartNode: containerd, runc
// and the kubelet, in the network namespace of RunInNetNS). The binaries are
// built from the Go module proxy by hack/build-tools.sh and cached outside the
// work tree; see Binary.
package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sweep-k8s/sweep/test/framework"
)

// adminToken authenticates the harness's admin user (group system:masters).
const adminToken = "sweep-admin-token"

// readyTimeout bounds the wait for a started component; cold starts take about
// 7 s on two cores.
const readyTimeout = 60 * time.Second

type config struct {
	controllerManager bool
	scheduler         bool
	address           string
	tokens            []Token
	apiServerFlags    []string
}

// Option configures Start.
type Option func(*config)

// WithControllerManager also runs kube-controller-manager, for tests that need
// garbage collection, the Job or CronJob controllers, or default
// ServiceAccounts.
func WithControllerManager() Option {
	return func(c *config) { c.controllerManager = true }
}

// WithScheduler also runs kube-scheduler, for tests with a real node
// (StartNode) whose pods must be scheduled.
func WithScheduler() Option {
	return func(c *config) { c.scheduler = true }
}

// WithAddress makes kube-apiserver listen on every address and advertise ip,
// an address that pods can reach (the loopback stays usable for the test), and
// makes kube-controller-manager publish the API server's self-signed serving
// certificate as kube-root-ca.crt, so that in-cluster clients verify it. For
// a control plane inside the network namespace of a real node.
func WithAddress(ip string) Option {
	return func(c *config) { c.address = ip }
}

// Token is an extra static bearer token for the API server's token file, for
// tests that need a user other than the admin (RBAC checks).
type Token struct {
	Token, User string
	Groups      []string
}

// WithToken adds a static bearer token.
func WithToken(tok Token) Option {
	return func(c *config) { c.tokens = append(c.tokens, tok) }
}

// WithAPIServerFlags appends flags to kube-apiserver's command line, after the
// harness's own (a later flag of the same name wins), for tests that need an
// API server configured like a particular distribution, for example
// "--enable-admission-plugins=OwnerReferencesPermissionEnforcement" as on
// OpenShift.
func WithAPIServerFlags(flags ...string) Option {
	return func(c *config) { c.apiServerFlags = append(c.apiServerFlags, flags...) }
}

// ControlPlane is a running control plane. Everything it started is stopped by
// the test's cleanup.
type ControlPlane struct {
	// Config is an admin client config for the API server.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file equivalent to Config, with
	// the context named "sweep".
	Kubeconfig string
	// Dir holds the control plane's data, certificates and logs.
	Dir string

	etcd, apiserver, kcm, scheduler *process
	apiURL                          string
	apiPort                         int
	address                         string
}

// Start runs a fresh control plane in a temporary directory of the test,
// waits until it is ready and stops it in the test's cleanup. It fails the
// test when a binary is missing (run `make kube`).
func Start(t testing.TB, opts ...Option) *ControlPlane {
	t.Helper()
	cp, err := Run(t.TempDir(), opts...)
	if cp != nil {
		t.Cleanup(func() {
			if t.Failed() {
				cp.dumpLogs(t)
			}
			cp.Stop()
		})
	}
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	return cp
}

// Run starts a control plane with its data in dir (for programs such as the
// demo; tests use Start). The caller must call Stop, also after an error
// when the returned control plane is not nil.
func Run(dir string, opts ...Option) (*ControlPlane, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cp := &ControlPlane{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cp, fmt.Errorf("control plane directory: %w", err)
	}
	return cp, cp.start(cfg)
}

func (cp *ControlPlane) start(cfg config) error {
	dir := cp.Dir
	bins := map[string]string{}
	// Only what this control plane runs: make demo builds no more.
	names := []string{"etcd", "kube-apiserver"}
	if cfg.controllerManager {
		names = append(names, "kube-controller-manager")
	}
	if cfg.scheduler {
		names = append(names, "kube-scheduler")
	}
	for _, name := range names {
		path, err := Binary(name)
		if err != nil {
			return err
		}
		bins[name] = path
	}
	ports, err := framework.FreePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	cp.apiPort, cp.address = apiPort, cfg.address

	if err := writeFiles(dir, cfg.tokens); err != nil {
		return err
	}

	cp.etcd = &process{
		name: "etcd", path: bins["etcd"], logPath: filepath.Join(dir, "etcd.log"),
		args: []string{
			"--name=sweep",
			"--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + loopbackURL("http", etcdClient),
			"--advertise-client-urls=" + loopbackURL("http", etcdClient),
			"--listen-peer-urls=" + loopbackURL("http", etcdPeer),
			"--initial-advertise-peer-urls=" + loopbackURL("http", etcdPeer),
			"--initial-cluster=sweep=" + loopbackURL("http", etcdPeer),
			"--unsafe-no-fsync",
			"--log-level=warn",
		},
	}
	cp.apiURL = loopbackURL("https", apiPort)
	cp.apiserver = &process{
		name: "kube-apiserver", path: bins["kube-apiserver"], logPath: filepath.Join(dir, "kube-apiserver.log"),
		args: []string{
			"--etcd-servers=" + loopbackURL("http", etcdClient),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// The kubernetes Service endpoints would have to be a non-loopback
			// address; nothing here needs them.
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(apiPort),
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
			"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
			"--service-cluster-ip-range=10.96.0.0/24",
			"--audit-log-path=" + filepath.Join(dir, "audit.log"),
			"--audit-policy-file=" + filepath.Join(dir, "audit-policy.yaml"),
			"--audit-log-mode=blocking",
			"--v=0",
		},
	}
	if cfg.address != "" {
		cp.apiserver.args = append(cp.apiserver.args, "--bind-address=0.0.0.0", "--advertise-address="+cfg.address)
	}
	cp.apiserver.args = append(cp.apiserver.args, cfg.apiServerFlags...)
	if err := cp.etcd.start(); err != nil {
		return err
	}
	if err := cp.StartAPIServer(); err != nil {
		return err
	}

	cp.Config = &rest.Config{
		Host:            cp.apiURL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200,
		Burst:           400,
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return err
	}
	if err := cp.registerKubelets(); err != nil {
		return err
	}

	if cfg.controllerManager {
		cp.kcm = &process{
			name: "kube-controller-manager", path: bins["kube-controller-manager"],
			logPath: filepath.Join(dir, "kube-controller-manager.log"),
			args: []string{
				"--kubeconfig=" + cp.Kubeconfig,
				"--authentication-kubeconfig=" + cp.Kubeconfig,
				"--authorization-kubeconfig=" + cp.Kubeconfig,
				"--bind-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(kcmPort),
				"--cert-dir=" + filepath.Join(dir, "kcm-certs"),
				"--leader-elect=false",
				"--service-account-private-key-file=" + filepath.Join(dir, "sa.key"),
				"--use-service-account-credentials=false",
				"--controllers=*",
				"--v=0",
			},
		}
		if cfg.address != "" {
			cp.kcm.args = append(cp.kcm.args, "--root-ca-file="+cp.ServingCert())
		}
		if err := cp.kcm.start(); err != nil {
			return err
		}
		if err := cp.waitDefaultServiceAccount(); err != nil {
			return err
		}
	}
	if cfg.scheduler {
		cp.scheduler = &process{
			name: "kube-scheduler", path: bins["kube-scheduler"],
			logPath: filepath.Join(dir, "kube-scheduler.log"),
			args: []string{
				"--kubeconfig=" + cp.Kubeconfig,
				"--authentication-kubeconfig=" + cp.Kubeconfig,
				"--authorization-kubeconfig=" + cp.Kubeconfig,
				"--bind-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(schedPort),
				"--leader-elect=false",
				"--v=0",
			},
		}
		if err := cp.scheduler.start(); err != nil {
			return err
		}
	}
	return nil
}

// ServingCert is the path of kube-apiserver's self-signed serving
// certificate (its own CA), which it writes at start.
func (cp *ControlPlane) ServingCert() string {
	return filepath.Join(cp.Dir, "certs", "apiserver.crt")
}

// APIServerPort is kube-apiserver's secure port.
func (cp *ControlPlane) APIServerPort() int { return cp.apiPort }

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) on the
// same address and waits until it is ready.
func (cp *ControlPlane) StartAPIServer() error {
	if err := cp.apiserver.start(); err != nil {
		return err
	}
	return cp.waitReady()
}

// StopAPIServer stops kube-apiserver, leaving etcd and the controller manager
// running, for tests of API outages.
func (cp *ControlPlane) StopAPIServer() {
	cp.apiserver.stop(syscall.SIGTERM, 10*time.Second)
}

// KillAPIServer kills kube-apiserver with SIGKILL: connections are reset,
// nothing is shut down gracefully. StartAPIServer starts it again.
func (cp *ControlPlane) KillAPIServer() {
	cp.apiserver.stop(syscall.SIGKILL, time.Second)
}

// KillEtcd kills etcd with SIGKILL, leaving kube-apiserver running without
// its storage. StartEtcd starts it again on the same data.
func (cp *ControlPlane) KillEtcd() {
	cp.etcd.stop(syscall.SIGKILL, time.Second)
}

// StartEtcd starts etcd again after KillEtcd.
func (cp *ControlPlane) StartEtcd() error {
	return cp.etcd.start()
}

// Stop stops every component, and first the fake kubelets that RegisterNode
// started on its API server. It is safe to call more than once.
func (cp *ControlPlane) Stop() {
	cp.stopKubelets()
	for _, p := range []*process{cp.scheduler, cp.kcm, cp.apiserver, cp.etcd} {
		if p != nil {
			p.stop(syscall.SIGTERM, 10*time.Second)
		}
	}
}

// Clientset returns an admin clientset.
func (cp *ControlPlane) Clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return cs
}

// AuditLog is the path of the API server's audit log (metadata level, every
// request), for tests that count the requests a client makes.
func (cp *ControlPlane) AuditLog() string { return filepath.Join(cp.Dir, "audit.log") }

func (cp *ControlPlane) waitReady() error {
	cfg := &rest.Config{Host: cp.apiURL, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 5 * time.Second}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("ready client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if cp.apiserver.exited() {
			return fmt.Errorf("kube-apiserver exited:\n%s", cp.apiserver.logTail(20))
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s (last error: %w):\n%s", readyTimeout, err, cp.apiserver.logTail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitDefaultServiceAccount waits until the controller manager has created the
// default ServiceAccount, so that tests can create pods right away.
func (cp *ControlPlane) waitDefaultServiceAccount() error {
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if cp.kcm.exited() {
			return fmt.Errorf("kube-controller-manager exited:\n%s", cp.kcm.logTail(20))
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no default ServiceAccount after %s:\n%s", readyTimeout, cp.kcm.logTail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) dumpLogs(t testing.TB) {
	for _, p := range []*process{cp.etcd, cp.apiserver, cp.kcm, cp.scheduler} {
		if p != nil {
			t.Logf("--- last lines of %s log:\n%s", p.name, p.logTail(30))
		}
	}
}

// WriteKubeconfig writes a kubeconfig for cfg with a single context "sweep".
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["sweep"] = &clientcmdapi.Cluster{Server: cfg.Host, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["sweep"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["sweep"] = &clientcmdapi.Context{Cluster: "sweep", AuthInfo: "sweep", Namespace: "default"}
	kc.CurrentContext = "sweep"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func writeFiles(dir string, extra []Token) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal service account public key: %w", err)
	}
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", adminToken)
	for _, tok := range extra {
		tokens += fmt.Sprintf("%s,%s,%s,%q\n", tok.Token, tok.User, tok.User, joinGroups(tok.Groups))
	}
	files := map[string][]byte{
		"sa.key":            pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		"sa.pub":            pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv":        []byte(tokens),
		"audit-policy.yaml": []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func joinGroups(groups []string) string {
	s := ""
	for i, g := range groups {
		if i > 0 {
			s += ","
		}
		s += g
	}
	return s
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// APIServerCPUSeconds is the CPU time the API server has used so far (user
// and system), for benchmarks of what clients cost it.
func (cp *ControlPlane) APIServerCPUSeconds() float64 { return cp.apiserver.cpuSeconds() }
