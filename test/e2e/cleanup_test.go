package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/cleanup/oneshot"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// cleanupEntryPoint returns the sweepd binary under the name the image
// keeps from spectro-cleanup, /cleanup (here <tmp>/cleanup).
func cleanupEntryPoint(t *testing.T) string {
	t.Helper()
	bin := testbin.Build(t, "./cmd/sweepd")
	link := filepath.Join(t.TempDir(), "cleanup")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// selfJob is a cleanup workload installed the way spectro-cleanup's README
// installs it: a ServiceAccount, Role, RoleBinding, ClusterRole and
// ClusterRoleBinding, a ConfigMap with the config, and the Job itself, whose
// pod the test plays. The permission to delete the Job comes only from the
// ClusterRole. The Role also lists pods, which spectro-cleanup's README
// does not grant and sweep needs to prove that no other pod runs as the
// ServiceAccount (docs/cleanup.md; without it, TestSelfCleanupShared).
type selfJob struct {
	ns, clusterRole string
	kubeconfig      string // authenticates as the Job's pod
	token           string // the same, bound to the pod
	host, file      string // a file under the allowed root, to be removed
	configDir       string
}

func installSelfJob(t *testing.T, cp *controlplane.ControlPlane, cs kubernetes.Interface, ns string) *selfJob {
	t.Helper()
	ctx := t.Context()
	j := &selfJob{ns: ns, clusterRole: ns + "-cleanup"}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup"}}, metav1.CreateOptions{}))
	all := []string{"*"}
	must(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup-role"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "serviceaccounts"}, Verbs: all},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		},
	}, metav1.CreateOptions{}))
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "spectro-cleanup", Namespace: ns}}
	must(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "spectro-cleanup-role"},
		Subjects:   sa,
	}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: j.clusterRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: all},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: all},
		},
	}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: j.clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: j.clusterRole},
		Subjects:   sa,
	}, metav1.CreateOptions{}))
	must(cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup-config"}}, metav1.CreateOptions{}))

	job, err := cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"name": "spectro-cleanup"}},
			Spec: corev1.PodSpec{
				RestartPolicy:      corev1.RestartPolicyNever,
				ServiceAccountName: "spectro-cleanup",
				Containers: []corev1.Container{{
					Name: "spectro-cleanup", Image: "example.invalid/spectro-cleanup", Command: []string{"/cleanup"},
				}},
			},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Play the kubelet: the Job controller creates the pod, we run it.
	var pod *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=spectro-cleanup"})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		pod = &pods.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no pod for Job %s/%s: %v", ns, job.Name, err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &metav1.Time{Time: time.Now()}
	must(cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}))

	// The process authenticates with a token bound to the pod, as in the
	// cluster.
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "spectro-cleanup", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j.token = tok.Status.Token
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok.Status.Token
	j.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(j.kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}

	j.host = t.TempDir()
	j.file = filepath.Join(j.host, "etc/cni/net.d/00-multus.conf")
	if err := os.MkdirAll(filepath.Dir(j.file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j.file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	j.configDir = t.TempDir()
	j.writeConfig(t, fmt.Sprintf(`[%q, %q]`, j.file, filepath.Join(j.host, "opt/cni/bin/multus")),
		fmt.Sprintf(`[{"group": "", "version": "v1", "resource": "configmaps", "name": "spectro-cleanup-config", "namespace": %q}]`, ns))
	return j
}

func (j *selfJob) writeConfig(t *testing.T, files, resources string) {
	t.Helper()
	for name, data := range map[string]string{cleanup.FileConfigName: files, cleanup.ResourceConfigName: resources} {
		if err := os.WriteFile(filepath.Join(j.configDir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// args are spectro-cleanup's flags for this Job, plus ours for the test
// environment (kubeconfig, config dir, allowed root).
func (j *selfJob) args(extra ...string) []string {
	return append([]string{
		"--self-gvr=batch/v1/jobs", "--self-name=spectro-cleanup", "--self-namespace=" + j.ns,
		"--cluster-role-name=" + j.clusterRole, "--cluster-role-binding-name=" + j.clusterRole,
		"--kubeconfig=" + j.kubeconfig, "--config-dir=" + j.configDir, "--allowed-root=" + j.host,
	}, extra...)
}

// startCleanup starts the entry point; lines of its stderr go to the
// returned channel (closed at EOF) and to the test log.
func startCleanup(t *testing.T, entry string, args []string) (*exec.Cmd, *strings.Builder, <-chan string) {
	t.Helper()
	cmd := exec.Command(entry, args...)
	stdout := &strings.Builder{}
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, stdout, lines
}

// finish drains stderr into the log, waits for the process and returns its
// exit code.
func finishCleanup(t *testing.T, cmd *exec.Cmd, stdout *strings.Builder, lines <-chan string, timeout time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		for l := range lines {
			t.Log(l)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("cleanup still running after %s", timeout)
	}
	_ = cmd.Wait()
	t.Logf("stdout:\n%s", stdout.String())
	return cmd.ProcessState.ExitCode()
}

func runCleanup(t *testing.T, entry string, args []string) (int, string) {
	t.Helper()
	cmd, stdout, lines := startCleanup(t, entry, args)
	code := finishCleanup(t, cmd, stdout, lines, 2*time.Minute)
	return code, stdout.String()
}

// waitFor waits for a log line containing s.
func waitForLine(t *testing.T, lines <-chan string, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("cleanup exited before logging %q", s)
			}
			t.Log(l)
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q in the log after %s", s, timeout)
		}
	}
}

// assertCleanedUp checks that everything the Job brought is gone: the
// ClusterRole and the config ConfigMap at once, the rest through the
// garbage collector.
func assertCleanedUp(t *testing.T, cs kubernetes.Interface, j *selfJob) {
	t.Helper()
	ctx := t.Context()
	gone := func(what string, get func() error) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			err := get()
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Errorf("%s not gone: %v", what, err)
		}
	}
	for what, get := range map[string]func() error{
		"ClusterRole": func() error {
			_, err := cs.RbacV1().ClusterRoles().Get(ctx, j.clusterRole, metav1.GetOptions{})
			return err
		},
		"config ConfigMap": func() error {
			_, err := cs.CoreV1().ConfigMaps(j.ns).Get(ctx, "spectro-cleanup-config", metav1.GetOptions{})
			return err
		},
	} {
		// These are deleted by the process itself: gone already.
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there right after the run (err %v)", what, err)
		}
	}
	gone("ClusterRoleBinding", func() error {
		_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, j.clusterRole, metav1.GetOptions{})
		return err
	})
	gone("Job", func() error {
		_, err := cs.BatchV1().Jobs(j.ns).Get(ctx, "spectro-cleanup", metav1.GetOptions{})
		return err
	})
	gone("ServiceAccount", func() error {
		_, err := cs.CoreV1().ServiceAccounts(j.ns).Get(ctx, "spectro-cleanup", metav1.GetOptions{})
		return err
	})
	gone("Role", func() error {
		_, err := cs.RbacV1().Roles(j.ns).Get(ctx, "spectro-cleanup-role", metav1.GetOptions{})
		return err
	})
	gone("RoleBinding", func() error {
		_, err := cs.RbacV1().RoleBindings(j.ns).Get(ctx, "spectro-cleanup-rolebinding", metav1.GetOptions{})
		return err
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(j.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
	if err != nil {
		t.Errorf("the Job's pod is not gone: %v", err)
	}
	if _, err := os.Stat(j.file); !os.IsNotExist(err) {
		t.Errorf("%s not removed: %v", j.file, err)
	}
}

// assertUntouched checks that nothing was deleted.
func assertUntouched(t *testing.T, cs kubernetes.Interface, j *selfJob) {
	t.Helper()
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Job"] = cs.BatchV1().Jobs(j.ns).Get(ctx, "spectro-cleanup", metav1.GetOptions{})
	_, checks["ConfigMap"] = cs.CoreV1().ConfigMaps(j.ns).Get(ctx, "spectro-cleanup-config", metav1.GetOptions{})
	_, checks["ClusterRole"] = cs.RbacV1().ClusterRoles().Get(ctx, j.clusterRole, metav1.GetOptions{})
	_, checks["ServiceAccount"] = cs.CoreV1().ServiceAccounts(j.ns).Get(ctx, "spectro-cleanup", metav1.GetOptions{})
	_, checks["file"] = os.Stat(j.file)
	for what, err := range checks {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	sa, err := cs.CoreV1().ServiceAccounts(j.ns).Get(ctx, "spectro-cleanup", metav1.GetOptions{})
	if err == nil && len(sa.OwnerReferences) != 0 {
		t.Errorf("ServiceAccount got ownerReferences: %v", sa.OwnerReferences)
	}
}

func TestCleanupSelfJob(t *testing.T) {
	entry := cleanupEntryPoint(t)
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)

	t.Run("blocking, no gRPC", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "self-plain")
		code, out := runCleanup(t, entry, j.args("--cleanup-timeout-seconds=10"))
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		// The Job may update itself (its ClusterRole grants everything on
		// jobs): it hangs off the ClusterRole, whose delete takes it too.
		for _, want := range []string{
			"cleanup summary:",
			"deleted      self     clusterroles.rbac.authorization.k8s.io self-plain-cleanup",
			"collected    self     clusterrolebindings.rbac.authorization.k8s.io self-plain-cleanup",
			"collected    self     jobs.batch self-plain/spectro-cleanup",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("summary lacks %q:\n%s", want, out)
			}
		}
		assertCleanedUp(t, cs, j)
	})

	finalizeCalls := []struct {
		name string
		call func(t *testing.T, base string) error
	}{
		{"FinalizeCleanup over gRPC", func(t *testing.T, base string) error {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			hc := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
			client := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, base+oneshot.FinalizeCleanupProcedure, connect.WithGRPC())
			_, err := client.CallUnary(t.Context(), connect.NewRequest(&emptypb.Empty{}))
			return err
		}},
		{"FinalizeCleanup over Connect", func(t *testing.T, base string) error {
			resp, err := http.Post(base+oneshot.FinalizeCleanupProcedure, "application/json", strings.NewReader("{}"))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "{}" {
				return fmt.Errorf("%s %q", resp.Status, body)
			}
			return nil
		}},
	}
	for i, fc := range finalizeCalls {
		t.Run(fc.name, func(t *testing.T) {
			j := installSelfJob(t, cp, cs, "self-finalize-"+strconv.Itoa(i))
			port := framework.FreePort(t)
			const timeout = 300
			cmd, stdout, lines := startCleanup(t, entry, j.args("--enable-grpc-server", "--grpc-port="+strconv.Itoa(port), "--cleanup-timeout-seconds="+strconv.Itoa(timeout)))
			waitForLine(t, lines, "waiting for FinalizeCleanup", time.Minute)
			// Waiting: the Job is still there.
			if _, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{}); err != nil {
				t.Fatalf("Job gone before FinalizeCleanup: %v", err)
			}
			called := time.Now()
			if err := fc.call(t, "http://127.0.0.1:"+strconv.Itoa(port)); err != nil {
				t.Fatalf("FinalizeCleanup: %v", err)
			}
			if code := finishCleanup(t, cmd, stdout, lines, time.Minute); code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			if el := time.Since(called); el > 30*time.Second {
				t.Errorf("exited %s after FinalizeCleanup", el)
			}
			assertCleanedUp(t, cs, j)
		})
	}

	t.Run("timeout fallback", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "self-timeout")
		start := time.Now()
		code, _ := runCleanup(t, entry, j.args("--enable-grpc-server", "--grpc-port="+strconv.Itoa(framework.FreePort(t)), "--cleanup-timeout=2"))
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		if el := time.Since(start); el < 2*time.Second {
			t.Errorf("exited after %s, before --cleanup-timeout", el)
		}
		assertCleanedUp(t, cs, j)
	})

	t.Run("typo key refused", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "self-typo")
		j.writeConfig(t, fmt.Sprintf("[%q]", j.file),
			fmt.Sprintf(`[{"version": "v1", "resource": "configmaps", "nmae": "spectro-cleanup-config", "namespace": %q}]`, j.ns))
		code, _ := runCleanup(t, entry, j.args())
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		assertUntouched(t, cs, j)
	})

	t.Run("out-of-root path refused", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "self-root")
		outside := filepath.Join(t.TempDir(), "outside")
		if err := os.WriteFile(outside, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		j.writeConfig(t, fmt.Sprintf("[%q, %q]", j.file, outside),
			fmt.Sprintf(`[{"version": "v1", "resource": "configmaps", "name": "spectro-cleanup-config", "namespace": %q}]`, j.ns))
		code, _ := runCleanup(t, entry, j.args())
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		if _, err := os.Stat(outside); err != nil {
			t.Errorf("outside file: %v", err)
		}
		assertUntouched(t, cs, j)
	})

	t.Run("dry run", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "self-dry")
		code, out := runCleanup(t, entry, j.args("--dry-run", "--enable-grpc-server", "--grpc-port="+strconv.Itoa(framework.FreePort(t))))
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		if !strings.Contains(out, "would-delete") {
			t.Errorf("no would-delete in the summary:\n%s", out)
		}
		assertUntouched(t, cs, j)
	})
}
