package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
	"github.com/sweep-k8s/sweep/test/framework/witness"
)

// unitForTest returns a copy of systemd/sweepd.service whose ExecStart names
// the freshly built sweepd, since systemd-analyze verify checks that the
// command exists and is executable.
func unitForTest(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../systemd/sweepd.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "ExecStart=/usr/local/bin/sweepd daemon") {
		t.Fatal("sweepd.service: ExecStart does not run /usr/local/bin/sweepd daemon")
	}
	bin := testbin.Build(t, "./cmd/sweepd")
	unit := filepath.Join(t.TempDir(), "sweepd.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/sweepd", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	return unit
}

// unitFiles reads the unit and its example environment file.
func unitFiles(t *testing.T) (unit, env []byte) {
	t.Helper()
	unit, err := os.ReadFile("../../systemd/sweepd.service")
	if err != nil {
		t.Fatal(err)
	}
	env, err = os.ReadFile("../../systemd/sweepd.env")
	if err != nil {
		t.Fatal(err)
	}
	return unit, env
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed (Debian package systemd; .ci/run installs it): %v", err)
	}
	return path
}

func TestSystemdUnitVerify(t *testing.T) {
	unit := unitForTest(t)
	out, err := exec.Command(systemdAnalyze(t), "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdExecStart expands the unit's ExecStart= as systemd does, with
// the unit's Environment= and the example environment file (or a variant of
// it), and runs sweepd daemon with the result: the schedule is one argument
// whatever its spaces, and every flag is accepted (exit 1 for the missing
// kubeconfig, not 2 for usage).
func TestSystemdExecStart(t *testing.T) {
	unit, envFile := unitFiles(t)
	sweepd := testbin.Build(t, "./cmd/sweepd")

	// The unit's default is the daemon's, so that an environment file
	// without SWEEPD_SCHEDULE changes nothing.
	help, _ := exec.Command(sweepd, "daemon", "--help").CombinedOutput()
	// Help wraps a flag's description to the terminal: join its lines.
	help = regexp.MustCompile(`\n {20,}`).ReplaceAll(help, []byte(" "))
	m := regexp.MustCompile(`-schedule string\s+[^\n]*\(default "([^"]+)"\)`).FindSubmatch(help)
	if m == nil {
		t.Fatalf("no --schedule default in sweepd daemon --help:\n%s", help)
	}
	daemonDefault := string(m[1])

	tests := []struct {
		name string
		// env is the environment file's content.
		env          string
		wantSchedule string
	}{
		{name: "the example file", env: string(envFile), wantSchedule: "@hourly"},
		{name: "a five-field cron spec", env: string(envFile) + "\nSWEEPD_SCHEDULE=\"*/20 * * * *\"\n", wantSchedule: "*/20 * * * *"},
		{name: "a descriptor with a space, unquoted", env: "SWEEPD_SCHEDULE=@every 30m\n", wantSchedule: "@every 30m"},
		{name: "no file: the daemon's default", wantSchedule: daemonDefault},
		// Files written before SWEEPD_SCHEDULE keep their schedule.
		{name: "a schedule in SWEEPD_ARGS wins", env: "SWEEPD_ARGS=--schedule=@daily --min-age=15m\n", wantSchedule: "@daily"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv, err := unitExecStart(string(unit), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("argv %q", argv)
			var schedules []string
			for i, a := range argv {
				if v, ok := strings.CutPrefix(a, "--schedule="); ok {
					schedules = append(schedules, v)
				}
				// A scratch state directory: the daemon is not to write the
				// host's /var/lib/sweepd.
				if strings.HasPrefix(a, "--state-dir=") {
					argv[i] = "--state-dir=" + t.TempDir()
				}
			}
			// As the flag package takes it: the last one wins.
			if len(schedules) == 0 || schedules[len(schedules)-1] != tt.wantSchedule {
				t.Fatalf("schedules %q, want the last to be %q", schedules, tt.wantSchedule)
			}
			if argv[0] != "/usr/local/bin/sweepd" || argv[1] != "daemon" {
				t.Fatalf("argv %q: want /usr/local/bin/sweepd daemon", argv)
			}
			cmd := exec.Command(sweepd, append(argv[1:], "--node-name=node-a", "--kubeconfig=/nonexistent/kubeconfig")...)
			out, err := cmd.CombinedOutput()
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "no kubernetes access") {
				t.Fatalf("sweepd %q: %v, want exit 1 for the missing kubeconfig:\n%s", argv[1:], err, out)
			}
		})
	}
}

// TestUnitExecStart pins the expansion rules of systemd.service(5) that
// TestSystemdExecStart relies on.
func TestUnitExecStart(t *testing.T) {
	tests := []struct {
		name, unit, env string
		want            []string
	}{
		{name: "$VAR splits at white space", unit: "Environment=A=x\nExecStart=/bin/c $A\n", env: "A=one  two\n", want: []string{"/bin/c", "one", "two"}},
		{name: "an empty $VAR is no argument", unit: "Environment=A=\nExecStart=/bin/c $A end\n", want: []string{"/bin/c", "end"}},
		{name: "${VAR} is one argument", unit: "ExecStart=/bin/c --s=${A}\n", env: "A='0 * * * *'\n", want: []string{"/bin/c", "--s=0 * * * *"}},
		{name: "quoted words", unit: `ExecStart=/bin/c "a b" 'c d' e\"f` + "\n", want: []string{"/bin/c", "a b", "c d", `e"f`}},
		{name: "the file overrides Environment=", unit: "Environment=\"A=a b\" B=c\nExecStart=/bin/c ${A} ${B}\n", env: "# comment\n; comment\nA=\"x y\"\n", want: []string{"/bin/c", "x y", "c"}},
		{name: "an unset variable", unit: "ExecStart=/bin/c ${NONE} $NONE\n", want: []string{"/bin/c", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := unitExecStart(tt.unit, tt.env)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// unitExecStart returns the argv systemd runs for a unit's ExecStart=, with
// the unit's Environment= lines overridden by env, an EnvironmentFile=. It
// implements what the unit uses of systemd.service(5): words split at white
// space, with single and double quotes and backslash escapes; a word that
// is just $VAR becomes the value split at white space, zero or more
// arguments; ${VAR} elsewhere is replaced in its word, which stays one
// argument.
func unitExecStart(unit, env string) ([]string, error) {
	vars := map[string]string{}
	var execStart []string
	for _, l := range strings.Split(unit, "\n") {
		switch {
		case strings.HasPrefix(l, "Environment="):
			words, err := splitUnitWords(strings.TrimPrefix(l, "Environment="))
			if err != nil {
				return nil, err
			}
			for _, w := range words {
				k, v, _ := strings.Cut(w, "=")
				vars[k] = v
			}
		case strings.HasPrefix(l, "ExecStart="):
			var err error
			if execStart, err = splitUnitWords(strings.TrimPrefix(l, "ExecStart=")); err != nil {
				return nil, err
			}
		}
	}
	if execStart == nil {
		return nil, errors.New("no ExecStart=")
	}
	for _, l := range strings.Split(env, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("environment file line %q", l)
		}
		// A quoted value loses its quotes; an unquoted one keeps its
		// inner white space.
		words, err := splitUnitWords(v)
		if err != nil {
			return nil, err
		}
		if len(v) > 0 && (v[0] == '"' || v[0] == '\'') {
			v = strings.Join(words, " ")
		}
		vars[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	braced := regexp.MustCompile(`\$\{(\w+)\}`)
	var argv []string
	for _, w := range execStart {
		if name, ok := strings.CutPrefix(w, "$"); ok && regexp.MustCompile(`^\w+$`).MatchString(name) {
			argv = append(argv, strings.Fields(vars[name])...)
			continue
		}
		argv = append(argv, braced.ReplaceAllStringFunc(w, func(m string) string { return vars[m[2:len(m)-1]] }))
	}
	return argv, nil
}

// splitUnitWords splits a unit file's value into words as systemd does:
// at white space, except inside single or double quotes, with a backslash
// escaping the next character.
func splitUnitWords(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
		quote  rune
		escape bool
	)
	for _, r := range s {
		switch {
		case escape:
			cur.WriteRune(r)
			escape, inWord = false, true
		case r == '\\':
			escape, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escape {
		return nil, fmt.Errorf("unterminated quote or escape in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestSystemdUnitSecurity keeps the unit's hardening: exposure at most 2.0 on
// systemd-analyze's scale, where the unhardened units of node_exporter,
// containerd and node-problem-detector score about 9.
func TestSystemdUnitSecurity(t *testing.T) {
	unit := unitForTest(t)
	out, err := exec.Command(systemdAnalyze(t), "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for sweepd\.service: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security exposure: %.1f", exposure)
	if exposure > 2.0 {
		t.Fatalf("exposure %.1f > 2.0:\n%s", exposure, out)
	}
}

// notifySocket plays systemd's side of sd_notify: a datagram socket whose
// messages arrive on the returned channel.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	addr := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	msgs := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return addr, msgs
}

// TestDaemonSystemdNotify runs sweepd daemon as systemd would run
// sweepd.service (NOTIFY_SOCKET, WATCHDOG_USEC): READY=1 only after the first
// sync of the node's pods, which waits for the API server; WATCHDOG=1 at half
// the watchdog interval meanwhile, since the daemon is healthy while it waits.
func TestDaemonSystemdNotify(t *testing.T) {
	cp := controlplane.Start(t)
	addr, msgs := notifySocket(t)
	// Pings every 500 ms; a gap of a full second would get the daemon
	// restarted. Generous for a loaded two-core CI machine.
	const watchdog = time.Second
	t.Setenv("NOTIFY_SOCKET", addr)
	t.Setenv("WATCHDOG_USEC", strconv.Itoa(int(watchdog/time.Microsecond)))

	kubeobj.EnsureNode(t, cp.Clientset(t), "node-a")
	cp.StopAPIServer()
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+t.TempDir(), "--sync-timeout=2s")
	// Only the daemon may talk to the socket: the restarted kube-apiserver
	// inherits the environment and would send its own READY=1 (systemd's
	// NotifyAccess=main drops such messages).
	_ = os.Unsetenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("WATCHDOG_USEC")
	var pings []time.Time
	deadline := time.After(5 * time.Second)
waiting:
	for {
		select {
		case m := <-msgs:
			if m != "WATCHDOG=1" {
				t.Fatalf("before the API server is up: got %q, want only WATCHDOG=1", m)
			}
			pings = append(pings, time.Now())
		case <-deadline:
			break waiting
		}
	}
	// 5 s at one ping per 500 ms, less the start-up.
	if len(pings) < 5 {
		t.Fatalf("%d watchdog pings in 5 s, want about 10", len(pings))
	}
	gaps := make([]time.Duration, 0, len(pings))
	for i := 1; i < len(pings); i++ {
		gaps = append(gaps, pings[i].Sub(pings[i-1]))
	}
	t.Logf("%d watchdog pings in 5 s; gaps %v", len(pings), gaps)
	for _, g := range gaps {
		if g > watchdog {
			t.Errorf("gap of %v between pings exceeds the watchdog interval %v", g, watchdog)
		}
	}

	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-msgs:
			if m == "WATCHDOG=1" {
				continue
			}
			if m != "READY=1" {
				t.Fatalf("got %q, want READY=1", m)
			}
			if code, _ := d.Get("/readyz"); code != http.StatusOK {
				t.Fatalf("READY=1 sent while /readyz = %d", code)
			}
			checkMetricsDocumented(t, d)
			return
		case <-timeout:
			t.Fatal("no READY=1 within 30 s of the API server's start")
		}
	}
}

// checkMetricsDocumented checks that every sweep_* metric the daemon serves
// is in docs/metrics.md's tables, and logs the daemon's resident memory (the
// chart's requests and limits are based on it).
func checkMetricsDocumented(t *testing.T, d *sweepdproc.Proc) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	code, body := d.Get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sweep_\w+) `).FindAllStringSubmatch(body, -1) {
		if !strings.Contains(string(doc), "`"+m[1]) {
			t.Errorf("metric %s is not in docs/metrics.md", m[1])
		}
	}
	t.Logf("daemon resident memory: %.1f MiB", d.Metric(t, "process_resident_memory_bytes")/(1<<20))
}

// TestSystemdEnvExamplesAreSafe runs the daemon as the unit runs it with each
// SWEEPD_ARGS example of sweepd.env, against the views that a machine which
// left its registration, or a second runtime, gives it (issue 33): a
// kubeconfig whose Node outlived its kubelet (this boot's ID, its Lease no
// longer renewed) and a CRI socket that no kubelet uses, of the same name
// and version as the kubelet's. Every example deletes nothing and says why;
// with the kubelet alive and its runtime, each prunes the dead.
func TestSystemdEnvExamplesAreSafe(t *testing.T) {
	unit, envFile := unitFiles(t)
	examples := regexp.MustCompile(`(?m)^#?SWEEPD_ARGS=.*$`).FindAllString(string(envFile), -1)
	if len(examples) < 3 {
		t.Fatalf("%d SWEEPD_ARGS examples in sweepd.env, want the default, cri and CNI DEL ones", len(examples))
	}
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	old := time.Now().Add(-time.Hour)
	livePod := multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")}
	liveSandbox := multuscache.NewSandboxID()
	// The kubelet's runtime runs the live pod; a second one, of the same
	// name and version, runs another pod and no kubelet uses it.
	kubelets, second := fakecri.Start(t), fakecri.Start(t)
	kubelets.AddPod(liveSandbox, livePod.UID)
	second.AddPod(multuscache.NewSandboxID(), multuscache.NewUID())
	for _, rt := range []*fakecri.Server{kubelets, second} {
		rt.SetVersion("containerd", "v2.4.2")
	}
	bootID, err := controlplane.MachineBootID()
	if err != nil {
		t.Fatal(err)
	}

	for _, example := range examples {
		argv, err := unitExecStart(string(unit), strings.TrimPrefix(example, "#"))
		if err != nil {
			t.Fatal(err)
		}
		cri := slices.Contains(argv, "--liveness=cri")
		t.Run(example, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			live := sandboxFiles(t, dir, liveSandbox, livePod, old)
			gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
			run := func(t *testing.T, endpoint string) *sweepdproc.Proc {
				addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
				// Later flags win: the test's directories, cluster and
				// socket in place of the host's.
				args := append(argv[1:len(argv):len(argv)], "--node-name=node-a", "--kubeconfig="+cp.Kubeconfig, "--multus-dir="+dir,
					"--cri-endpoint="+endpoint, "--state-dir="+t.TempDir(), "--cni-bin-dir="+t.TempDir(), "--metrics-addr="+addr,
					"--schedule=@every 1s", "--allow-short-intervals", "--log-format=text")
				return sweepdproc.StartCmd(t, exec.Command(sweepd, args...), addr, filepath.Join(t.TempDir(), "sweepd.log"), "sweepd")
			}
			t.Run("the Node outlived its kubelet, the socket is no kubelet's: nothing deleted", func(t *testing.T) {
				if err := controlplane.StopKubelet(cs, "node-a"); err != nil {
					t.Fatal(err)
				}
				// Until then one read of the Lease proves a kubelet
				// renewing it alive: it may be.
				awaitLeaseOlder(t, cs, "node-a", controlplane.KubeletLeaseDuration)
				d := run(t, second.Endpoint)
				series := `sweep_prune_skipped_runs_total{reason="node-unproven"}`
				if cri {
					series = `sweep_prune_skipped_runs_total{reason="runtime-unproven"}`
				}
				framework.Eventually(t, 60*time.Second, "two skipped runs", func() bool { return d.Metric(t, series) >= 2 })
				if got := d.Metric(t, "sweep_views_proven"); got != 0 {
					t.Errorf("sweep_views_proven = %v, want 0", got)
				}
				if got := d.Metric(t, "sweep_prune_runs_total"); got != 0 {
					t.Errorf("sweep_prune_runs_total = %v, want 0", got)
				}
				framework.CheckFiles(t, "live pod", live, true)
				framework.CheckFiles(t, "deleted pod", gone, true)
			})
			t.Run("the kubelet alive, its runtime: the dead pruned", func(t *testing.T) {
				setNodeBootID(t, cs, "node-a", bootID) // the kubelet starts again
				witness.StartKubelet(t, "--container-runtime-endpoint="+kubelets.Endpoint)
				d := run(t, kubelets.Endpoint)
				d.WaitMetric(t, "sweep_views_proven", 1)
				framework.Eventually(t, 60*time.Second, "a prune run", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= 1 })
				framework.CheckFiles(t, "live pod", live, true)
				if slices.Contains(argv, "--cni-del") {
					// No plugin in the test's --cni-bin-dir: the DEL
					// fails and the file waits for the next run.
					framework.Eventually(t, 60*time.Second, "a failed CNI DEL", func() bool {
						return d.Metric(t, `sweep_prune_kept_files{cache="multus",reason="cni-del-failed"}`) >= 1
					})
					return
				}
				framework.Eventually(t, 60*time.Second, "the deleted pod's files removed", func() bool { return !framework.Exists(gone[0]) })
				framework.CheckFiles(t, "deleted pod", gone, false)
			})
		})
	}
}
