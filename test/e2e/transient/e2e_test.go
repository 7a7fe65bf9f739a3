package transient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/transient"
)

const pluginName = "kubectl-create-transient_configmap"

// runnerToken authenticates a user without any rights but those of
// runnerRules, to show that they are enough.
const runnerToken = "transient-runner-token"

// runnerRules are the permissions the plugin may use, exactly the table of
// docs/kubectl-plugin.md.
var runnerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"get"}},
	{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "get", "list", "watch", "patch", "delete"}},
	// delete: the fallback when the garbage collector is late.
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "delete"}},
	// To warn about what blocks the Job's pods; with --logs also to find them.
	{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"list"}},
	// For --logs only.
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
}

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error

	sharedOnce sync.Once
	sharedDir  string
	sharedCP   *controlplane.ControlPlane
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCP != nil {
		if code != 0 {
			printLogTails(sharedDir)
		}
		sharedCP.Stop()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	if pluginDir != "" {
		os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// printLogTails prints the last lines of the shared control plane's logs,
// as controlplane.Start does in a failed test's log.
func printLogTails(dir string) {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		data, err := os.ReadFile(filepath.Join(dir, name+".log"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "--- %s log: %v\n", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-30):]
		fmt.Fprintf(os.Stderr, "--- last lines of the shared control plane's %s log:\n%s\n", name, strings.Join(lines, "\n"))
	}
}

// pluginPATH builds the plugin once per test binary into a directory of its
// own and returns that directory, to put on kubectl's PATH.
func pluginPATH(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginErr = os.MkdirTemp("", "transient-plugin-")
		if pluginErr != nil {
			return
		}
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", filepath.Join(pluginDir, pluginName), "github.com/sweep-k8s/sweep/cmd/"+pluginName)
		out, err := cmd.CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		t.Logf("built %s in %s", pluginName, time.Since(start).Round(time.Millisecond))
		// kubectl's completion executable for the plugin, as the release
		// archive installs it beside the plugin.
		shim := "kubectl_complete-create-transient_configmap"
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "cmd", pluginName, shim))
		if err == nil {
			err = os.WriteFile(filepath.Join(pluginDir, shim), data, 0o755)
		}
		pluginErr = err
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

// cluster is a control plane and what the tests run against it: the shared
// one of the TestPlugin... tests, each in namespaces of its own, or one of
// a test's own.
type cluster struct {
	cp      *controlplane.ControlPlane
	cs      kubernetes.Interface
	kubectl string
	path    string
}

// newCluster starts a control plane of the test's own, stopped in its cleanup.
func newCluster(t *testing.T, opts ...controlplane.Option) *cluster {
	t.Helper()
	kubectl, path := pluginTools(t)
	cp := controlplane.Start(t, append([]controlplane.Option{controlplane.WithControllerManager()}, opts...)...)
	return &cluster{cp: cp, cs: cp.Clientset(t), kubectl: kubectl, path: path}
}

// sharedCluster returns the control plane the TestPlugin... tests share,
// started by the first of them and stopped by TestMain. Each test works in
// namespaces of its own, so that they run in parallel and any one runs alone.
//
// It runs kube-controller-manager (Job controller, garbage collector, TTL
// controller) but no kubelet: the tests finish pods by hand. The API server
// enforces OwnerReferencesPermissionEnforcement, as OpenShift and hardened
// clusters do, so that every run shows the plugin sets no owner reference that
// needs more rights than `kubectl create job --from`. runnerToken
// authenticates the user "runner" (TestPluginLeastPrivilege).
func sharedCluster(t *testing.T) *cluster {
	t.Helper()
	kubectl, path := pluginTools(t)
	// No t in here: a t.Fatal would leave the Once done and the cluster unset.
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "transient-controlplane-")
		if sharedErr != nil {
			return
		}
		// Run returns a control plane to Stop also with an error.
		sharedCP, sharedErr = controlplane.Run(sharedDir, controlplane.WithControllerManager(),
			controlplane.WithToken(controlplane.Token{Token: runnerToken, User: "runner"}),
			controlplane.WithAPIServerFlags("--enable-admission-plugins=OwnerReferencesPermissionEnforcement"))
	})
	if sharedErr != nil {
		t.Fatalf("shared control plane: %v", sharedErr)
	}
	return &cluster{cp: sharedCP, cs: sharedCP.Clientset(t), kubectl: kubectl, path: path}
}

// pluginTools returns kubectl's path and the directory of the plugin built
// for the test binary.
func pluginTools(t *testing.T) (kubectl, path string) {
	t.Helper()
	kubectl, err := controlplane.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	return kubectl, pluginPATH(t)
}

// namespace creates a namespace and waits for its default ServiceAccount,
// without which the Job controller's pod creations fail and back off.
func (c *cluster) namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", name, err)
	}
	return name
}

// cronJob creates a suspended CronJob (the test starts runs by hand) whose
// container reads key num of ConfigMap cmName through an optional
// configMapKeyRef, the shape of the incident's CronJob.
func (c *cluster) cronJob(t *testing.T, ns, name, cmName string) *batchv1.CronJob {
	t.Helper()
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 0 1 1 *",
			Suspend:  new(true),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: batchv1.JobSpec{
					BackoffLimit: new(int32(0)),
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{
							Name: "batch", Image: "registry.invalid/batch:1",
							Env: []corev1.EnvVar{{Name: "NUM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
								LocalObjectReference: corev1.LocalObjectReference{Name: cmName}, Key: "num", Optional: new(true),
							}}}},
						}},
					}},
				},
			},
		},
	}
	cj, err := c.cs.BatchV1().CronJobs(ns).Create(t.Context(), cj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cj
}

// run is one invocation of kubectl with the plugin on PATH.
type run struct {
	cmd            *exec.Cmd
	stdout, stderr framework.Buffer
	done           chan struct{}
	code           int
	elapsed        time.Duration
}

// start runs `kubectl ARGS...` with only the plugin's directory on PATH, so
// that nothing but kubectl's own plugin discovery can find it.
func (c *cluster) start(t *testing.T, kubeconfig string, args ...string) *run {
	t.Helper()
	return c.startEnv(t, kubeconfig, nil, args...)
}

// startEnv is start with more environment variables, which kubectl passes on
// to the plugin.
func (c *cluster) startEnv(t *testing.T, kubeconfig string, env []string, args ...string) *run {
	t.Helper()
	r := &run{done: make(chan struct{})}
	r.cmd = exec.Command(c.kubectl, args...)
	r.cmd.Env = append([]string{"PATH=" + c.path, "KUBECONFIG=" + kubeconfig, "HOME=" + t.TempDir()}, env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	begin := time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		err := r.cmd.Wait()
		r.elapsed = time.Since(begin)
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.code = 128 + int(ws.Signal())
			}
		default:
			r.code = -1
		}
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// wait returns the exit code, failing the test if the run takes longer than
// limit.
func (r *run) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(limit):
		t.Fatalf("still running after %s\nstdout:\n%s\nstderr:\n%s", limit, &r.stdout, &r.stderr)
	}
	t.Logf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), &r.stdout, &r.stderr)
	return r.code
}

// waitStderr waits until the plugin's stderr contains want, failing early if
// it exits first.
func (r *run) waitStderr(t *testing.T, want string, within time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		if strings.Contains(r.stderr.String(), want) {
			return true, nil
		}
		if !r.running() {
			return false, fmt.Errorf("plugin exited with %d", r.code)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("stderr lacks %q after %s: %v\nstdout:\n%s\nstderr:\n%s", want, within, err, &r.stdout, &r.stderr)
	}
}

func (r *run) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// pod waits for the Job's pod, failing early if the run ended first.
func (c *cluster) pod(t *testing.T, r *run, ns, job string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !r.running() {
			return false, fmt.Errorf("plugin exited with %d before the pod appeared\nstdout:\n%s\nstderr:\n%s", r.code, &r.stdout, &r.stderr)
		}
		pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pod = &pods.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod of job %s/%s: %v", ns, job, err)
	}
	return pod
}

// finishPod plays the kubelet: it marks the pod Succeeded or Failed, and the
// Job controller derives the Job's condition from that.
func (c *cluster) finishPod(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	now := metav1.Now()
	exit := int32(0)
	if phase == corev1.PodFailed {
		exit = 1
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p.Status.Phase = phase
		p.Status.ContainerStatuses = nil
		for _, ctr := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: now, FinishedAt: now}},
			})
		}
		_, err = c.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("set pod %s %s: %v", pod.Name, phase, err)
	}
}

// checkRunning checks the objects of a run in flight: the Job started with
// the TTL and the run label, the ConfigMap owned by the Job's UID, with the
// given data.
func (c *cluster) checkRunning(t *testing.T, ns, jobName, cmName string, ttl int32, data map[string]string) (*batchv1.Job, *corev1.ConfigMap) {
	t.Helper()
	ctx := t.Context()
	job, err := c.cs.BatchV1().Jobs(ns).Get(ctx, jobName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	if _, ok := job.Annotations[transient.StartSpecAnnotation]; ok || job.Spec.Parallelism == nil || *job.Spec.Parallelism == 0 {
		t.Errorf("job not started: parallelism %v, annotations %v", job.Spec.Parallelism, job.Annotations)
	}
	if job.Spec.TTLSecondsAfterFinished == nil || *job.Spec.TTLSecondsAfterFinished != ttl {
		t.Errorf("ttlSecondsAfterFinished %v, want %d", job.Spec.TTLSecondsAfterFinished, ttl)
	}
	if job.Labels[transient.RunLabel] == "" {
		t.Errorf("job lacks label %s: %v", transient.RunLabel, job.Labels)
	}
	cm, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("configmap: %v", err)
	}
	refs := cm.OwnerReferences
	if len(refs) != 1 || refs[0].UID != job.UID || refs[0].Kind != "Job" || refs[0].APIVersion != "batch/v1" || refs[0].Name != jobName {
		t.Errorf("configmap owner references %+v, want the job %s", refs, job.UID)
	}
	if cm.Labels[transient.RunLabel] != job.Labels[transient.RunLabel] {
		t.Errorf("configmap run label %q, job's %q", cm.Labels[transient.RunLabel], job.Labels[transient.RunLabel])
	}
	for k, v := range data {
		if cm.Data[k] != v {
			t.Errorf("configmap data %q = %q, want %q", k, cm.Data[k], v)
		}
	}
	return job, cm
}

// checkClean waits until no Job and no ConfigMap of the test (anything but
// the namespace's kube-root-ca.crt) remains in ns.
func (c *cluster) checkClean(t *testing.T, ns string, within time.Duration) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		jobs, err := c.cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, j := range jobs.Items {
			left = append(left, "job/"+j.Name)
		}
		cms, err := c.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, cm := range cms.Items {
			if cm.Name != "kube-root-ca.crt" {
				left = append(left, "configmap/"+cm.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("left in %s after %s: %v (%v)", ns, within, left, err)
	}
}

// pluginWrites reads the audit log for the plugin's requests that change
// something in ns, in order, as "verb resource".
func (c *cluster) pluginWrites(t *testing.T, ns string) []string {
	t.Helper()
	var writes []string
	all := 0
	for _, ev := range controlplane.ReadAudit(t, c.cp.AuditLog()) {
		if !ev.Complete() || ev.ObjectRef.Namespace != ns || !ev.By(pluginName) {
			continue
		}
		all++
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			writes = append(writes, ev.Verb+" "+ev.ObjectRef.Resource)
		}
	}
	t.Logf("the plugin made %d requests in %s, %d of them writes", all, ns, len(writes))
	return writes
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !regexp.MustCompile(`(?m)^` + l + `$`).MatchString(out) {
			t.Errorf("output lacks a line matching %q:\n%s", l, out)
		}
	}
}

// The TestPlugin... tests run the plugin through the real kubectl against the
// shared control plane (sharedCluster).

// TestPluginSuccess runs a Job that succeeds: the Job and its ConfigMap while
// it runs, the output, the crash-safe order of the plugin's writes, and
// nothing left behind.
func TestPluginSuccess(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "success")
	c.cronJob(t, ns, "nightly", "cfg")
	env := filepath.Join(t.TempDir(), "run.env")
	if err := os.WriteFile(env, []byte("# run settings\nMODE=manual\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=1", "--from-env-file="+env, "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	job, _ := c.checkRunning(t, ns, "manual", "cfg", 600, map[string]string{"num": "1", "MODE": "manual"})
	if job.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" {
		t.Errorf("annotations %v", job.Annotations)
	}
	if env := pod.Spec.Containers[0].Env; len(env) != 1 || env[0].ValueFrom.ConfigMapKeyRef.Name != "cfg" {
		t.Errorf("pod env %+v: want the CronJob's reference to cfg", env)
	}
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	wantLines(t, r.stdout.String(),
		`job.batch/manual created \(not started\)`, `configmap/cfg created`, `job.batch/manual started`,
		`job.batch/manual condition met \(Complete\)`, `job.batch/manual deleted`, `configmap/cfg deleted`)
	// The plugin waited for the ConfigMap to go: nothing is left right away.
	c.checkClean(t, ns, 10*time.Second)

	// The API server saw the crash-safe order, and no deletion of the
	// ConfigMap by the plugin: the garbage collector did it.
	writes := c.pluginWrites(t, ns)
	want := []string{"create jobs", "create configmaps", "patch jobs", "delete jobs"}
	if strings.Join(writes, ", ") != strings.Join(want, ", ") {
		t.Errorf("plugin's writes in order: %v, want %v", writes, want)
	}
}

// TestPluginReplacesLeftoverSuspendedJob: a suspended Job left by an
// interrupted run is replaced; a Job of the same name that is not the
// plugin's is not.
func TestPluginReplacesLeftoverSuspendedJob(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "leftover")
	cj := c.cronJob(t, ns, "nightly", "cfg")
	// What a run of an earlier version killed between creating its Job
	// and its ConfigMap left: a suspended Job of ours that never started
	// (today's leftovers expire by themselves, see TestPluginSIGKILLAtStep).
	// A Job of the same name that is not ours must stay and block the run.
	leave := func(name string, labels map[string]string) {
		t.Helper()
		job := transient.JobFromCronJob(cj, name)
		job.Labels = labels
		job.Spec.Suspend = new(true)
		if _, err := c.cs.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leave("manual", map[string]string{transient.RunLabel: "dead1"})
	leave("theirs", nil)
	// Past the setup deadline of --request-timeout=1s (3 × 1 s + 5 s),
	// when no live run can still start it.
	time.Sleep(8500 * time.Millisecond)

	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns, "--request-timeout=1s",
		"--from-literal=num=9", "--job-name=theirs", "--job-from=cronjob/nightly")
	if code := r.wait(t, 30*time.Second); code != 1 || !strings.Contains(r.stderr.String(), "already exists") {
		t.Fatalf("exit %d, want 1 and AlreadyExists:\n%s", code, &r.stderr)
	}
	if _, err := c.cs.BatchV1().Jobs(ns).Get(t.Context(), "theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("a Job that is not ours was touched: %v", err)
	}

	r = c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns, "--request-timeout=1s",
		"--from-literal=num=9", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, &r.stderr)
	}
	wantLines(t, r.stdout.String(), `job.batch/manual was left unstarted by an interrupted run \(dead1\); replaced`,
		`job.batch/manual created \(not started\)`, `job.batch/manual started`, `configmap/cfg deleted`)
}

// TestPluginFailureDashSpelling runs a Job that fails, with the dash spelling
// of the plugin's name: exit 1, the failure on stderr, and cleanup.
func TestPluginFailureDashSpelling(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "failure")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient-configmap", "cfg", "--namespace="+ns,
		"--from-literal=num=2", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	c.finishPod(t, pod, corev1.PodFailed)
	if code := r.wait(t, 60*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	wantLines(t, r.stdout.String(), `job.batch/manual condition met \(Failed: BackoffLimitExceeded\)`, `job.batch/manual deleted`, `configmap/cfg deleted`)
	if !strings.Contains(r.stderr.String(), `error: job "manual": job failed: BackoffLimitExceeded`) {
		t.Errorf("stderr lacks the failure:\n%s", &r.stderr)
	}
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginLongJobNotCut: a job running longer than 30s is not cut.
func TestPluginLongJobNotCut(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "long")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=3", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	select {
	case <-r.done:
		t.Fatalf("plugin exited with %d while the job ran\nstdout:\n%s\nstderr:\n%s", r.code, &r.stdout, &r.stderr)
	case <-time.After(35 * time.Second):
	}
	c.checkRunning(t, ns, "manual", "cfg", 600, map[string]string{"num": "3"})
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if r.elapsed < 35*time.Second {
		t.Errorf("finished after %s", r.elapsed)
	}
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginTimeout: a Job that outlasts --timeout is deleted, exit 124.
func TestPluginTimeout(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "timeout")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=4", "--job-name=manual", "--job-from=cronjob/nightly", "--timeout=4s")
	c.pod(t, r, ns, "manual")
	if code := r.wait(t, 60*time.Second); code != 124 {
		t.Fatalf("exit %d, want 124", code)
	}
	// The plugin's timer or the Job's activeDeadlineSeconds, whichever
	// comes first (the Job controller counts from the Job's start time,
	// in whole seconds): the same outcome.
	wantLines(t, r.stdout.String(), `job.batch/manual not finished after 4s`, `job.batch/manual deleted`, `configmap/cfg deleted`)
	if !strings.Contains(r.stderr.String(), "timed out waiting for the job") {
		t.Errorf("stderr lacks the timeout:\n%s", &r.stderr)
	}
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginSignalMidWait: SIGINT or SIGTERM mid-wait deletes the Job before
// the plugin exits with 130, and the cluster is left clean.
func TestPluginSignalMidWait(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sigName(sig), func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t, strings.ToLower(sigName(sig)))
			c.cronJob(t, ns, "nightly", "cfg")
			r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
				"--from-literal=num=5", "--job-name=manual", "--job-from=cronjob/nightly")
			c.pod(t, r, ns, "manual")
			job, _ := c.checkRunning(t, ns, "manual", "cfg", 600, nil)
			if err := r.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(t, 30*time.Second); code != 130 {
				t.Fatalf("exit %d, want 130", code)
			}
			wantLines(t, r.stdout.String(), `job.batch/manual deleted`)
			// The Job is deleted before the plugin exits (it may linger a
			// moment for its pod's finalizer, but marked for deletion).
			got, err := c.cs.BatchV1().Jobs(ns).Get(t.Context(), "manual", metav1.GetOptions{})
			if err == nil && got.UID == job.UID && got.DeletionTimestamp == nil {
				t.Errorf("job not deleted when the plugin exited")
			}
			c.checkClean(t, ns, 30*time.Second)
		})
	}
}

// TestPluginSIGKILLThenJobDeleted: after SIGKILL mid-wait nothing is deleted,
// and the ConfigMap goes with its Job when that is deleted.
func TestPluginSIGKILLThenJobDeleted(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "sigkill")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=6", "--job-name=manual", "--job-from=cronjob/nightly")
	c.pod(t, r, ns, "manual")
	c.checkRunning(t, ns, "manual", "cfg", 600, nil)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 10*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d", code)
	}
	// Nobody deleted anything: the ConfigMap lives as long as its Job...
	time.Sleep(2 * time.Second)
	c.checkRunning(t, ns, "manual", "cfg", 600, nil)
	// ...and goes with it, by the garbage collector alone.
	err := c.cs.BatchV1().Jobs(ns).Delete(t.Context(), "manual", metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)})
	if err != nil {
		t.Fatal(err)
	}
	c.checkClean(t, ns, 30*time.Second)
}

// TestPluginSIGKILLThenTTLExpires: after SIGKILL mid-wait, the job finishes
// and its TTL runs out: the cluster removes everything.
func TestPluginSIGKILLThenTTLExpires(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "sigkill-ttl")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=7", "--job-name=manual", "--job-from=cronjob/nightly", "--ttl-after-finished=1s")
	pod := c.pod(t, r, ns, "manual")
	c.checkRunning(t, ns, "manual", "cfg", 1, nil)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.wait(t, 10*time.Second)
	c.finishPod(t, pod, corev1.PodSucceeded)
	// The TTL controller deletes the Job, the garbage collector the
	// ConfigMap: no client involved.
	c.checkClean(t, ns, 60*time.Second)
}

// TestPluginSIGKILLAtStep: a run killed at any step leaves only what the
// cluster removes by itself, without a later run: before the start, a Job that
// fails at its setup deadline (3 × --request-timeout + 5 s) and goes at once
// (TTL 0) with its ConfigMap; after it, a Job that ends at its deadline
// (--timeout) or when its pod ends, and goes after --ttl-after-finished. The
// plugin stops at the step (SWEEP_TRANSIENT_PAUSE_AT) and is killed there with
// SIGKILL.
func TestPluginSIGKILLAtStep(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	for _, tc := range []struct {
		step      string
		finishPod bool // play the kubelet: the step comes after the pod ends
	}{
		{step: transient.StepJobCreated},
		{step: transient.StepConfigMapCreated},
		{step: transient.StepJobStarted},
		{step: transient.StepJobFinished, finishPod: true},
		{step: transient.StepJobDeleted, finishPod: true},
	} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t, "kill-"+tc.step)
			c.cronJob(t, ns, "nightly", "cfg")
			r := c.startEnv(t, kc, []string{"SWEEP_TRANSIENT_PAUSE_AT=" + tc.step}, "create", "transient_configmap", "cfg", "-n", ns,
				"--from-literal=num=13", "--job-name=manual", "--job-from=cronjob/nightly",
				"--request-timeout=2s", "--timeout=5s", "--ttl-after-finished=1s")
			if tc.finishPod {
				c.finishPod(t, c.pod(t, r, ns, "manual"), corev1.PodSucceeded)
			}
			r.waitStderr(t, "paused at "+tc.step, 60*time.Second)
			if err := r.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(t, 10*time.Second); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("exit %d, want death by SIGKILL", code)
			}
			// The bound is seconds here (11 s setup deadline, 5 s timeout,
			// 1 s TTL, plus the controllers' latency); the wait is long so
			// that a loaded machine does not fail the test.
			c.checkClean(t, ns, 2*time.Minute)
		})
	}
}

// TestPluginDryRunServer: --dry-run=server (-o json, then without -o) prints
// the server's answers and creates nothing.
func TestPluginDryRunServer(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "dry-run")
	cj := c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=14", "--job-name=manual", "--job-from=cronjob/nightly", "--dry-run=server", "-o", "json")
	if code := r.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout.String()))
	var job batchv1.Job
	var cm corev1.ConfigMap
	if err := dec.Decode(&job); err != nil {
		t.Fatalf("job: %v", err)
	}
	if err := dec.Decode(&cm); err != nil {
		t.Fatalf("configmap: %v", err)
	}
	// The API server's answers: defaulted, with a UID, and the
	// ConfigMap owned by that UID; the Job in its setup form.
	if job.Kind != "Job" || job.UID == "" || job.Spec.Template.Spec.DNSPolicy != corev1.DNSClusterFirst ||
		job.Spec.Parallelism == nil || *job.Spec.Parallelism != 0 || job.Annotations[transient.StartSpecAnnotation] == "" {
		t.Errorf("job %+v", job)
	}
	if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != cj.UID || job.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Errorf("job owner references %+v", job.OwnerReferences)
	}
	if cm.Kind != "ConfigMap" || cm.Data["num"] != "14" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != job.UID {
		t.Errorf("configmap %+v", cm)
	}
	c.checkClean(t, ns, time.Second)

	// Without -o, kubectl's lines.
	r = c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=14", "--job-name=manual", "--job-from=cronjob/nightly", "--dry-run=server")
	if code := r.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if got, want := r.stdout.String(), "job.batch/manual created (server dry run)\nconfigmap/cfg created (server dry run)\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	c.checkClean(t, ns, time.Second)
}

// TestPluginQuotaRefusedPodsWarn: a Job whose pods are refused by quota:
// Warning, and the wait goes on.
func TestPluginQuotaRefusedPodsWarn(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "quota")
	c.cronJob(t, ns, "nightly", "cfg")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if _, err := c.cs.CoreV1().ResourceQuotas(ns).Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=15", "--job-name=manual", "--job-from=cronjob/nightly")
	// The Job controller's FailedCreate event, as kubectl would warn.
	r.waitStderr(t, "Warning: job.batch/manual: FailedCreate: Error creating: pods ", 60*time.Second)
	if !strings.Contains(r.stderr.String(), "exceeded quota: no-pods") {
		t.Errorf("the warning does not name the quota:\n%s", &r.stderr)
	}
	// Still waiting: a quota may be raised. The user ends it.
	if !r.running() {
		t.Fatalf("plugin exited with %d after the warning", r.code)
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 30*time.Second); code != 130 {
		t.Fatalf("exit %d, want 130", code)
	}
	c.checkClean(t, ns, 30*time.Second)
}

// TestPluginUnschedulableImagePullWarnings: an unschedulable pod, then one
// with an image it cannot pull: Warnings, and the wait goes on.
func TestPluginUnschedulableImagePullWarnings(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "blocked")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=16", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	// Play the scheduler, then the kubelet: what each reports in the
	// pod's status (there is neither here).
	setStatus := func(mutate func(*corev1.Pod)) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			mutate(p)
			_, err = c.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setStatus(func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}
	})
	r.waitStderr(t, "Warning: pod/"+pod.Name+": Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.", 60*time.Second)
	setStatus(func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "batch", Image: "registry.invalid/batch:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.invalid/batch:1"`}}}}
	})
	r.waitStderr(t, `Warning: pod/`+pod.Name+`: container batch: ImagePullBackOff: Back-off pulling image "registry.invalid/batch:1"`, 60*time.Second)
	if !r.running() {
		t.Fatalf("plugin exited with %d after the warnings", r.code)
	}
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginAPIServerWarnings: the API server's warnings are printed as
// kubectl prints them.
func TestPluginAPIServerWarnings(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "api-warning")
	cj := c.cronJob(t, ns, "nightly", "cfg")
	// A deprecated node label in the pod template: the API server
	// warns about it on every create of a Job from this template.
	cj.Spec.JobTemplate.Spec.Template.Spec.NodeSelector = map[string]string{"beta.kubernetes.io/os": "linux"}
	if _, err := c.cs.BatchV1().CronJobs(ns).Update(t.Context(), cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=17", "--job-name=manual", "--job-from=cronjob/nightly", "--dry-run=server")
	if code := r.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	wantLines(t, r.stderr.String(), regexp.QuoteMeta(`Warning: spec.template.spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use "kubernetes.io/os" instead`))
}

// TestPluginKubectlFindsPlugin: kubectl 1.31 and later find a create plugin
// whatever follows its name; 1.29 and 1.30 only when a flag follows it directly
// (they look up kubectl-create-transient_configmap-cfg otherwise), so
// docs/kubectl-plugin.md gives that order for them. Both orders work with the
// kubectl here.
func TestPluginKubectlFindsPlugin(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	for _, tc := range []struct{ name, args string }{
		{name: "NAME first", args: "create transient_configmap cfg --job-name=j --job-image=busybox --dry-run=client -o name"},
		{name: "a flag first, for kubectl 1.29 and 1.30", args: "create transient_configmap --dry-run=client cfg --job-name=j --job-image=busybox -o name"},
		{name: "dash spelling, a flag first", args: "create transient-configmap -o name --dry-run=client cfg --job-name=j --job-image=busybox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := c.start(t, kc, strings.Fields(tc.args)...)
			if code := r.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			if got, want := r.stdout.String(), "job.batch/j\nconfigmap/cfg\n"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
		})
	}
}

// TestPluginIsolate: --isolate with a CronJob whose configMapKeyRef is
// optional; the CronJob and the ConfigMap a scheduled run reads are untouched.
func TestPluginIsolate(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "isolate")
	cj := c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=8", "--job-name=manual", "--job-from=cronjob/nightly", "--isolate")
	pod := c.pod(t, r, ns, "manual")
	ref := pod.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef
	if !regexp.MustCompile(`^cfg-[a-z0-9]{5}$`).MatchString(ref.Name) || ref.Key != "num" || ref.Optional == nil || !*ref.Optional {
		t.Fatalf("pod reads %+v, want an optional reference to key num of cfg-xxxxx", ref)
	}
	c.checkRunning(t, ns, "manual", ref.Name, 600, map[string]string{"num": "8"})
	// What a scheduled run would read does not exist, and the CronJob
	// itself is unchanged.
	if _, err := c.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "cfg", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap cfg: %v, want not found", err)
	}
	got, err := c.cs.BatchV1().CronJobs(ns).Get(t.Context(), "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name; n != "cfg" || got.Generation != cj.Generation {
		t.Errorf("cronjob changed: reference %q, generation %d -> %d", n, cj.Generation, got.Generation)
	}
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	wantLines(t, r.stdout.String(), `configmap/`+ref.Name+` created`, `configmap/`+ref.Name+` deleted`)
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginIsolateRefusesUnreferencedConfigMap: --isolate refuses a template
// that does not reference the configmap.
func TestPluginIsolateRefusesUnreferencedConfigMap(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "isolate-unreferenced")
	c.cronJob(t, ns, "nightly", "other")
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=9", "--job-name=manual", "--job-from=cronjob/nightly", "--isolate")
	if code := r.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(r.stderr.String(), `does not reference configmap "cfg"`) {
		t.Errorf("stderr:\n%s", &r.stderr)
	}
	c.checkClean(t, ns, time.Second)
}

// TestPluginLeavesExistingConfigMap: an existing configmap is left alone.
func TestPluginLeavesExistingConfigMap(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "existing")
	c.cronJob(t, ns, "nightly", "cfg")
	theirs, err := c.cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"num": "theirs"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=10", "--job-name=manual", "--job-from=cronjob/nightly")
	if code := r.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	wantLines(t, r.stdout.String(), `job.batch/manual deleted`)
	got, err := c.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "cfg", metav1.GetOptions{})
	if err != nil || got.UID != theirs.UID || got.Data["num"] != "theirs" || len(got.OwnerReferences) != 0 {
		t.Fatalf("existing configmap touched: %+v, %v", got, err)
	}
	if err := c.cs.CoreV1().ConfigMaps(ns).Delete(t.Context(), "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.checkClean(t, ns, 30*time.Second)
}

// TestPluginJobFromImageWithLogs: a job from an image with a command, and
// --logs.
func TestPluginJobFromImageWithLogs(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "image")
	dir := t.TempDir()
	for name, data := range map[string]string{"a.conf": "A", "b.conf": "B"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := c.start(t, kc, "create", "transient_configmap", "files", "-n", ns, "--from-file="+dir,
		"--job-name=once", "--job-image=registry.invalid/tool:1", "--logs", "--log-level=debug", "--", "sh", "-c", "env")
	pod := c.pod(t, r, ns, "once")
	c.checkRunning(t, ns, "once", "files", 600, map[string]string{"a.conf": "A", "b.conf": "B"})
	ctr := pod.Spec.Containers[0]
	if ctr.Image != "registry.invalid/tool:1" || strings.Join(ctr.Command, " ") != "sh -c env" ||
		len(ctr.EnvFrom) != 1 || ctr.EnvFrom[0].ConfigMapRef.Name != "files" {
		t.Errorf("container %+v", ctr)
	}
	c.finishPod(t, pod, corev1.PodSucceeded)
	// No kubelet serves the logs (the API server answers an empty
	// stream for a pod on no node): the stream is opened once the
	// container terminated, and the run ends normally.
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if !strings.Contains(r.stderr.String(), `msg="streaming logs"`) || !strings.Contains(r.stderr.String(), "container=once") {
		t.Errorf("stderr lacks the attempt to stream the container's logs:\n%s", &r.stderr)
	}
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginLeastPrivilege: with --token, a user with only runnerRules runs the
// plugin; the same user elsewhere is refused before anything is created.
func TestPluginLeastPrivilege(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "rbac")
	cj := c.cronJob(t, ns, "nightly", "cfg")
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "transient-runner"}, Rules: runnerRules}
	if _, err := c.cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "transient-runner"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "runner"}},
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The admission plugin is on: the same user may not create a Job
	// whose owner reference blocks the CronJob's deletion, which is what
	// metav1.NewControllerRef makes.
	runner := rest.CopyConfig(c.cp.Config)
	runner.BearerToken = runnerToken
	rcs, err := kubernetes.NewForConfig(runner)
	if err != nil {
		t.Fatal(err)
	}
	blocking := transient.JobFromCronJob(cj, "blocking")
	blocking.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}
	if _, err := rcs.BatchV1().Jobs(ns).Create(ctx, blocking, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Fatalf("a Job with blockOwnerDeletion as the runner: %v, want forbidden by OwnerReferencesPermissionEnforcement", err)
	}

	r := c.start(t, kc, "create", "transient_configmap", "cfg", "-n", ns, "--token="+runnerToken,
		"--from-literal=num=12", "--job-name=manual", "--job-from=cronjob/nightly", "--logs")
	pod := c.pod(t, r, ns, "manual")
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if strings.Contains(r.stderr.String(), "forbidden") {
		t.Errorf("a request was forbidden:\n%s", &r.stderr)
	}
	c.checkClean(t, ns, 10*time.Second)

	// The same user elsewhere is refused before anything is created.
	other := c.namespace(t, "rbac-other")
	c.cronJob(t, other, "nightly", "cfg")
	r = c.start(t, kc, "create", "transient_configmap", "cfg", "-n", other, "--token="+runnerToken,
		"--from-literal=num=12", "--job-name=manual", "--job-from=cronjob/nightly")
	if code := r.wait(t, 30*time.Second); code != 1 || !strings.Contains(r.stderr.String(), "forbidden") {
		t.Fatalf("exit %d, want 1 and forbidden", code)
	}
	c.checkClean(t, other, time.Second)
}

// TestPluginContextAndNamespace: --context picks the context, -n overrides its
// namespace.
func TestPluginContextAndNamespace(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	kc := c.cp.Kubeconfig
	ns := c.namespace(t, "context")
	c.namespace(t, "context-default")
	c.cronJob(t, ns, "nightly", "cfg")
	// The current context points at nothing; only --context reaches the
	// cluster, and its namespace is not the one the run is in.
	kcfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	kcfg.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kcfg.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "sweep", Namespace: ns}
	kcfg.Contexts["sweep"].Namespace = "context-default"
	kcfg.CurrentContext = "nowhere"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kcfg, path); err != nil {
		t.Fatal(err)
	}

	// Without -n the context's namespace is used: the CronJob is not there.
	r := c.start(t, path, "create", "transient_configmap", "cfg", "--context=sweep",
		"--from-literal=num=11", "--job-name=manual", "--job-from=cronjob/nightly")
	if code := r.wait(t, 30*time.Second); code != 1 || !strings.Contains(r.stderr.String(), `cronjobs.batch "nightly" not found`) {
		t.Fatalf("exit %d, want 1 and cronjob not found in the context's namespace", code)
	}

	r = c.start(t, path, "create", "transient_configmap", "cfg", "--context", "sweep", "-n", ns,
		"--from-literal=num=11", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	c.checkRunning(t, ns, "manual", "cfg", 600, map[string]string{"num": "11"})
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	c.checkClean(t, ns, 10*time.Second)
	c.checkClean(t, "context-default", time.Second)
	c.checkClean(t, "default", time.Second)
}

// sigName is the signal's conventional name, for subtest and namespace names.
func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// TestPluginSurvivesAPIServerRestart stops the API server while the plugin
// waits: the wait must resume once it is back, not fail or clean up early.
// A control plane of its own, since the outage would disturb other tests.
func TestPluginSurvivesAPIServerRestart(t *testing.T) {
	c := newCluster(t)
	ns := c.namespace(t, "restart")
	c.cronJob(t, ns, "nightly", "cfg")
	r := c.start(t, c.cp.Kubeconfig, "create", "transient_configmap", "cfg", "-n", ns,
		"--from-literal=num=1", "--job-name=manual", "--job-from=cronjob/nightly")
	pod := c.pod(t, r, ns, "manual")
	c.cp.StopAPIServer()
	time.Sleep(3 * time.Second)
	if err := c.cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if !r.running() {
		t.Fatalf("plugin exited with %d during the outage\nstdout:\n%s\nstderr:\n%s", r.code, &r.stdout, &r.stderr)
	}
	c.checkRunning(t, ns, "manual", "cfg", 600, map[string]string{"num": "1"})
	c.finishPod(t, pod, corev1.PodSucceeded)
	if code := r.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	wantLines(t, r.stdout.String(), `job.batch/manual condition met \(Complete\)`, `configmap/cfg deleted`)
	c.checkClean(t, ns, 10*time.Second)
}

// TestPluginCompletionShim: kubectl_complete-create-transient_configmap,
// called with the plugin's arguments as kubectl calls a plugin's completion
// executable, completes the plugin's flags and their values.
func TestPluginCompletionShim(t *testing.T) {
	dir := pluginPATH(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"cfg", "--job-"}, []string{"--job-from", "--job-image", "--job-name"}},
		{[]string{"cfg", "--from-"}, []string{"--from-env-file", "--from-file", "--from-literal"}},
	} {
		cmd := exec.Command(filepath.Join(dir, "kubectl_complete-create-transient_configmap"), tc.args...)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w+"\t") {
				t.Errorf("%v: no %s in\n%s", tc.args, w, out)
			}
		}
	}
}

// TestPluginCompletionThroughKubectl checks what docs/kubectl-plugin.md says
// of completion through kubectl: kubectl (the tests' version) never asks a
// plugin under `kubectl create` to complete, and the top-level name that krew
// installs, `kubectl create-transient-configmap`, completes through the
// completion executable linked under that name's spelling. Should kubectl
// start to complete under create, the first case fails: the page must change.
func TestPluginCompletionThroughKubectl(t *testing.T) {
	kubectl, _ := pluginTools(t)
	plugin := pluginPATH(t)
	dir := t.TempDir()
	for _, l := range [][2]string{
		{pluginName, pluginName},
		{"kubectl_complete-create-transient_configmap", "kubectl_complete-create-transient_configmap"},
		// krew's name for the plugin, and its completion executable's.
		{pluginName, "kubectl-create_transient_configmap"},
		{"kubectl_complete-create-transient_configmap", "kubectl_complete-create_transient_configmap"},
	} {
		if err := os.Symlink(filepath.Join(plugin, l[0]), filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	complete := func(args ...string) string {
		cmd := exec.Command(kubectl, append([]string{"__complete"}, args...)...)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "KUBECONFIG=" + filepath.Join(dir, "none")}
		out, err := cmd.Output() // kubectl's debug lines go to stderr
		if err != nil {
			t.Fatalf("kubectl __complete %v: %v", args, err)
		}
		return string(out)
	}
	for _, tc := range []struct {
		args   []string
		want   bool // --job-name offered
		listed string
	}{
		{args: []string{"create", "transient_configmap", "cfg", "--job-"}, want: false},
		{args: []string{"create-transient-configmap", "cfg", "--job-"}, want: true},
	} {
		out := complete(tc.args...)
		if got := strings.Contains(out, "--job-name\t"); got != tc.want {
			t.Errorf("kubectl __complete %v offers --job-name: %v, want %v (docs/kubectl-plugin.md#completion says so)\n%s", tc.args, got, tc.want, out)
		}
	}
	if out := complete("create", "transient"); strings.Contains(out, "transient") {
		t.Errorf("kubectl now offers the plugin under create; docs/kubectl-plugin.md#completion says it does not:\n%s", out)
	}
	if out := complete("create-tr"); !strings.Contains(out, "create-transient-configmap") {
		t.Errorf("kubectl does not offer the top-level name create-transient-configmap:\n%s", out)
	}
}
