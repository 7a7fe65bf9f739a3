package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// TestSpectroCleanupCompat is docs/cleanup.md's "Differences from
// spectro-cleanup" table, one subtest per row: the same Job, flags and
// config a spectro-cleanup user has, run through the image's entry point
// against a real control plane with the garbage collector, and what is
// deleted, what is kept and the exit code checked.
func TestSpectroCleanupCompat(t *testing.T) {
	entry := cleanupEntryPoint(t)
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	noErr := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	configMap := func(t *testing.T, ns, name string, finalizers ...string) {
		t.Helper()
		noErr(cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}, metav1.CreateOptions{}))
	}
	release := func(t *testing.T, ns, name string) {
		t.Helper()
		noErr(cs.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}))
	}
	exists := func(t *testing.T, ns, name string) bool {
		t.Helper()
		_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	entryFor := func(ns, name string, mustDelete bool) string {
		return fmt.Sprintf(`{"version": "v1", "resource": "configmaps", "name": %q, "namespace": %q, "mustDelete": %t}`, name, ns, mustDelete)
	}

	// Break 1: entries after a failed mustDelete entry are not started, and
	// the workload keeps itself for inspection.
	t.Run("mustDelete stops the run", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-must")
		configMap(t, j.ns, "custom-resource", "example.com/forever")
		configMap(t, j.ns, "operator")
		configMap(t, j.ns, "crd")
		j.writeConfig(t, "[]", "["+strings.Join([]string{
			entryFor(j.ns, "custom-resource", true), entryFor(j.ns, "operator", false), entryFor(j.ns, "crd", false),
		}, ",")+"]")
		code, out := runCleanup(t, entry, j.args("--deletion-timeout-seconds=2"))
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		for _, name := range []string{"operator", "crd"} {
			if !exists(t, j.ns, name) {
				t.Errorf("%s deleted after the failed mustDelete entry", name)
			}
		}
		if !strings.Contains(out, "not started: the mustDelete entry") {
			t.Errorf("the summary does not say what was not started:\n%s", out)
		}
		if _, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{}); err != nil {
			t.Errorf("the Job deleted itself after a failed mustDelete entry: %v", err)
		}
		release(t, j.ns, "custom-resource")
	})

	// Break 2: RBAC written for spectro-cleanup grants delete only.
	t.Run("delete without get", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-deleteonly")
		ns := j.ns + "-target"
		noErr(cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
		configMap(t, ns, "leftover")
		grant(t, cs, ns, j.ns, "spectro-cleanup", "delete")
		j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+entryFor(ns, "leftover", true)+","+entryFor(j.ns, "spectro-cleanup-config", false)+"]")
		code, out := runCleanup(t, entry, j.args())
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if exists(t, ns, "leftover") {
			t.Errorf("leftover not deleted:\n%s", out)
		}
		assertCleanedUp(t, cs, j)
	})

	// A deletion that is refused is not a success, mustDelete or not.
	t.Run("a failed entry fails the exit code", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-failexit")
		ns := j.ns + "-target"
		noErr(cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
		configMap(t, ns, "forbidden")
		configMap(t, j.ns, "allowed")
		j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+entryFor(ns, "forbidden", false)+","+entryFor(j.ns, "allowed", false)+","+entryFor(j.ns, "spectro-cleanup-config", false)+"]")
		code, out := runCleanup(t, entry, j.args())
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if !exists(t, ns, "forbidden") || exists(t, j.ns, "allowed") {
			t.Errorf("forbidden exists %v (want true), allowed exists %v (want false):\n%s", exists(t, ns, "forbidden"), exists(t, j.ns, "allowed"), out)
		}
		// Not a mustDelete entry: the run went on and removed itself, as
		// spectro-cleanup does.
		assertCleanedUp(t, cs, j)
	})

	// spectro-cleanup stopped without resource-config.json (exit 1, after
	// the files), ignored a misnamed file-config.json, took a mistyped
	// mustDelete resource's 404 for success, and failed on a mistyped
	// --self-gvr only once the rest was deleted. Each is refused, before
	// anything is deleted and before the self-cleanup.
	t.Run("refused before anything is deleted", func(t *testing.T) {
		tests := []struct {
			name string
			// setup changes the Job's config directory; it returns
			// extra flags.
			setup   func(t *testing.T, j *selfJob) []string
			wantErr string
		}{
			{name: "no config directory", setup: func(t *testing.T, j *selfJob) []string {
				return []string{"--config-dir=" + filepath.Join(j.configDir, "typo")}
			}, wantErr: "does not exist"},
			{name: "neither config file", setup: func(t *testing.T, j *selfJob) []string {
				for _, name := range []string{"file-config.json", "resource-config.json"} {
					if err := os.Remove(filepath.Join(j.configDir, name)); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			}, wantErr: "has neither file-config.json nor resource-config.json"},
			{name: "misnamed file config", setup: func(t *testing.T, j *selfJob) []string {
				if err := os.Rename(filepath.Join(j.configDir, "file-config.json"), filepath.Join(j.configDir, "files-config.json")); err != nil {
					t.Fatal(err)
				}
				return nil
			}, wantErr: `has no file-config.json but has \"files-config.json\" (did you mean file-config.json?)`},
			{name: "mustDelete resource typo", setup: func(t *testing.T, j *selfJob) []string {
				j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+entryFor(j.ns, "spectro-cleanup-config", false)+
					`,{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitons","name":"x.example.com","mustDelete":true}]`)
				return nil
			}, wantErr: `did you mean \"customresourcedefinitions\"?`},
			{name: "self-gvr typo", setup: func(t *testing.T, j *selfJob) []string {
				return []string{"--self-gvr=batch/v1/jbos"}
			}, wantErr: `batch/v1 serves no resource \"jbos\": did you mean \"jobs\"?`},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				j := installSelfJob(t, cp, cs, fmt.Sprintf("compat-refused-%d", i))
				code, stderr := runCleanupStderr(t, entry, j.args(tt.setup(t, j)...))
				if code != 2 {
					t.Errorf("exit %d, want 2", code)
				}
				if !strings.Contains(stderr, tt.wantErr) {
					t.Errorf("stderr does not say %q:\n%s", tt.wantErr, stderr)
				}
				if _, err := os.Stat(j.file); err != nil {
					t.Errorf("file removed: %v", err)
				}
				if !exists(t, j.ns, "spectro-cleanup-config") {
					t.Error("the config ConfigMap was deleted")
				}
				if _, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{}); err != nil {
					t.Errorf("the Job deleted itself: %v", err)
				}
			})
		}
	})

	// Issue 50: read as absent, an empty name (a template's value left
	// unset) deleted every ConfigMap of the namespace, an empty namespace
	// too every one of the cluster, dry run or not.
	t.Run("empty name", func(t *testing.T) {
		for i, entries := range []string{
			`{"version":"v1","resource":"configmaps","namespace":"%s","name":""}`,
			`{"version":"v1","resource":"configmaps","namespace":"","name":""}`,
			`{"version":"v1","resource":"configmaps","labelSelector":" "}`,
		} {
			for _, dryRun := range []bool{true, false} {
				j := installSelfJob(t, cp, cs, fmt.Sprintf("compat-empty-%d-%t", i, dryRun))
				configMap(t, j.ns, "coredns")
				configMap(t, j.ns, "kube-proxy")
				j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+strings.ReplaceAll(entries, "%s", j.ns)+"]")
				args := j.args()
				if dryRun {
					args = append(args, "--dry-run")
				}
				code, stderr := runCleanupStderr(t, entry, args)
				if code != 2 || !strings.Contains(stderr, "is empty: give a value or remove the key") {
					t.Errorf("%s, dry run %t: exit %d, want 2 and the empty key named:\n%s", entries, dryRun, code, stderr)
				}
				for _, name := range []string{"coredns", "kube-proxy", "spectro-cleanup-config"} {
					if !exists(t, j.ns, name) {
						t.Errorf("%s: %s deleted", entries, name)
					}
				}
				assertUntouched(t, cs, j)
			}
		}
	})

	// spectro-cleanup reads an entry without a name as every object of the
	// type; sweep wants that said ("all": true, which spectro-cleanup
	// ignores, or a labelSelector).
	t.Run("entry without a name", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-noname")
		ns := j.ns + "-target"
		noErr(cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
		grant(t, cs, ns, j.ns, "spectro-cleanup", "get", "list", "watch", "delete")
		configMap(t, ns, "a")
		configMap(t, ns, "b")
		unnamed := fmt.Sprintf(`{"version":"v1","resource":"configmaps","namespace":%q}`, ns)
		j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+unnamed+","+entryFor(j.ns, "spectro-cleanup-config", false)+"]")
		code, stderr := runCleanupStderr(t, entry, j.args())
		if code != 2 || !strings.Contains(stderr, `names no object: give \"name\", a \"labelSelector\", or \"all\": true`) {
			t.Errorf("exit %d, want 2 and what to say:\n%s", code, stderr)
		}
		if !exists(t, ns, "a") || !exists(t, ns, "b") {
			t.Error("an entry without a name deleted objects")
		}
		assertUntouched(t, cs, j)

		all := fmt.Sprintf(`{"version":"v1","resource":"configmaps","namespace":%q,"all":true}`, ns)
		j.writeConfig(t, fmt.Sprintf("[%q]", j.file), "["+all+","+entryFor(j.ns, "spectro-cleanup-config", false)+"]")
		if code, out := runCleanup(t, entry, j.args()); code != 0 {
			t.Errorf("with all: true: exit %d, want 0:\n%s", code, out)
		}
		if exists(t, ns, "a") || exists(t, ns, "b") {
			t.Error(`"all": true left objects`)
		}
		assertCleanedUp(t, cs, j)
	})

	// Break 4: paths are literal unless --glob.
	t.Run("literal paths", func(t *testing.T) {
		for _, glob := range []bool{false, true} {
			t.Run("glob="+strconv.FormatBool(glob), func(t *testing.T) {
				j := installSelfJob(t, cp, cs, "compat-literal-"+strconv.FormatBool(glob))
				bin := filepath.Join(j.host, "opt/cni/bin")
				for _, f := range []string{"bridge", "multus"} {
					if err := os.MkdirAll(bin, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(bin, f), nil, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				j.writeConfig(t, fmt.Sprintf("[%q, %q]", j.file, filepath.Join(bin, "*")), "[]")
				args := j.args()
				if glob {
					args = append(args, "--glob")
				}
				if code, _ := runCleanup(t, entry, args); code != 0 {
					t.Errorf("exit %d, want 0", code)
				}
				left, _ := os.ReadDir(bin)
				if want := map[bool]int{false: 2, true: 0}[glob]; len(left) != want {
					t.Errorf("%d files left in %s, want %d", len(left), bin, want)
				}
				if _, err := os.Stat(j.file); !os.IsNotExist(err) {
					t.Errorf("%s not removed", j.file)
				}
			})
		}
	})

	// --blocking-deletion=false: spectro-cleanup waits --cleanup-timeout
	// before it deletes itself, gRPC server or not.
	t.Run("grace delay without blocking", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-grace")
		cmd, stdout, lines := startCleanup(t, entry, j.args("--blocking-deletion=false", "--cleanup-timeout=3"))
		waitForLine(t, lines, "waiting for FinalizeCleanup", time.Minute)
		if _, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{}); err != nil {
			t.Fatalf("Job gone before the grace delay: %v", err)
		}
		if code := finishCleanup(t, cmd, stdout, lines, time.Minute); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		assertCleanedUp(t, cs, j)
	})

	// Zero timeouts mean "do not wait" there; refusing them blocked the
	// uninstall.
	t.Run("zero timeouts", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-zero")
		code, out := runCleanup(t, entry, j.args("--cleanup-timeout=0", "--deletion-timeout-seconds=0", "--enable-grpc-server", "--grpc-port="+strconv.Itoa(framework.FreePort(t))))
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if strings.Contains(out, "waiting for FinalizeCleanup") {
			t.Error("waited despite --cleanup-timeout=0")
		}
		assertCleanedUp(t, cs, j)
	})

	// spectro-cleanup parses with Go's flag package: its manifests may spell
	// a long flag with one dash, a value after a space, and a boolean bare
	// or with =false. Every spelling runs unchanged.
	t.Run("Go flag spellings", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-goflags")
		var args []string
		for i, a := range j.args() {
			name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if i%2 == 0 {
				args = append(args, "-"+name+"="+value)
			} else {
				args = append(args, "-"+name, value)
			}
		}
		args = append(args, "-debug", "--debug=false", "-blocking-deletion=false", "-cleanup-timeout", "1",
			"-enable-grpc-server", "-grpc-port", strconv.Itoa(framework.FreePort(t)), "-deletion-timeout-seconds=30")
		code, out := runCleanup(t, entry, args)
		if code != 0 {
			t.Fatalf("%v: exit %d, want 0\n%s", args, code, out)
		}
		assertCleanedUp(t, cs, j)
	})

	// A busy gRPC port: the cleanup goes on without the server.
	t.Run("busy gRPC port", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-busyport")
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		code, _ := runCleanup(t, entry, j.args("--enable-grpc-server", "--grpc-port="+strconv.Itoa(port), "--cleanup-timeout=1"))
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		assertCleanedUp(t, cs, j)
	})

	// A ClusterRole the workload shares is not its to delete.
	t.Run("shared ClusterRole kept", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-shared")
		crb, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), j.clusterRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "someone-else", Namespace: "default"})
		noErr(cs.RbacV1().ClusterRoleBindings().Update(t.Context(), crb, metav1.UpdateOptions{}))
		code, out := runCleanup(t, entry, j.args())
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if !strings.Contains(out, "left in place: the ClusterRoleBinding also binds ServiceAccount default/someone-else") {
			t.Errorf("the summary does not say why the ClusterRole stays:\n%s", out)
		}
		for what, get := range map[string]func() error{
			"ClusterRole": func() error {
				_, err := cs.RbacV1().ClusterRoles().Get(t.Context(), j.clusterRole, metav1.GetOptions{})
				return err
			},
			"ClusterRoleBinding": func() error {
				_, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), j.clusterRole, metav1.GetOptions{})
				return err
			},
		} {
			if err := get(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		eventuallyGone(t, "Job", func() error {
			_, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{})
			return err
		})
	})

	// Only --cluster-role-name: spectro-cleanup takes its default binding
	// name for the other.
	t.Run("cluster role name alone", func(t *testing.T) {
		j := installSelfJob(t, cp, cs, "compat-crname")
		crb, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), j.clusterRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		noErr(nil, cs.RbacV1().ClusterRoleBindings().Delete(t.Context(), j.clusterRole, metav1.DeleteOptions{}))
		crb.ObjectMeta = metav1.ObjectMeta{Name: "spectro-cleanup-rolebinding"}
		noErr(cs.RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}))
		var args []string
		for _, a := range j.args() {
			if !strings.HasPrefix(a, "--cluster-role-binding-name=") {
				args = append(args, a)
			}
		}
		if code, _ := runCleanup(t, entry, args); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		eventuallyGone(t, "ClusterRoleBinding spectro-cleanup-rolebinding", func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), "spectro-cleanup-rolebinding", metav1.GetOptions{})
			return err
		})
		eventuallyGone(t, "Job", func() error {
			_, err := cs.BatchV1().Jobs(j.ns).Get(t.Context(), "spectro-cleanup", metav1.GetOptions{})
			return err
		})
	})
}

// runCleanupStderr runs the entry point to its end and returns its exit
// code and stderr, where a refusal is explained.
func runCleanupStderr(t *testing.T, entry string, args []string) (int, string) {
	t.Helper()
	cmd := exec.Command(entry, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// grant lets the ServiceAccount saNS/sa do verbs on configmaps in ns.
func grant(t *testing.T, cs kubernetes.Interface, ns, saNS, sa string, verbs ...string) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "cleanup"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cleanup"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cleanup"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: saNS}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventuallyGone waits for get to answer not found.
func eventuallyGone(t *testing.T, what string, get func() error) {
	t.Helper()
	framework.Eventually(t, time.Minute, what+" to be gone", func() bool { return apierrors.IsNotFound(get()) })
}
