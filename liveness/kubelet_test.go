package liveness

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKubeletEndpoint pins which runtime endpoint a kubelet uses, by the
// kubelet's own precedence: --container-runtime-endpoint on its command
// line, else the last *.conf drop-in of --config-dir (in lexical order)
// that sets containerRuntimeEndpoint, else its --config file, else the
// default. Reading a kubelet's socket wrong proves the wrong runtime; a
// configuration that cannot be read proves nothing.
func TestKubeletEndpoint(t *testing.T) {
	const (
		crio   = "unix:///run/crio/crio.sock"
		k3s    = "unix:///run/k3s/containerd/containerd.sock"
		docker = "unix:///run/cri-dockerd.sock"
		other  = "unix:///run/other.sock"
	)
	cfg := func(endpoint string) string {
		return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n" +
			"containerRuntimeEndpoint: " + endpoint + "\n"
	}
	const noEndpoint = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
	for _, tc := range []struct {
		name  string
		args  []string // after the kubelet's path
		files map[string]string
		want  string // the endpoint; or, with err, in the error
		err   bool
	}{
		{name: "nothing set: the default",
			args: []string{"--v=2"}, want: kubeletDefaultEndpoint},
		{name: "flag, = form",
			args: []string{"--container-runtime-endpoint=" + crio}, want: crio},
		{name: "flag, space form",
			args: []string{"--node-ip", "10.0.0.5", "--container-runtime-endpoint", crio, "--v=2"}, want: crio},
		{name: "flag given twice: the last, as pflag does",
			args: []string{"--container-runtime-endpoint=" + crio, "--container-runtime-endpoint", k3s}, want: k3s},
		{name: "the kubelet's own path is no flag",
			args: nil, want: kubeletDefaultEndpoint},
		{name: "--config file, = form",
			args:  []string{"--config=/var/lib/kubelet/config.yaml"},
			files: map[string]string{"/var/lib/kubelet/config.yaml": cfg(k3s)}, want: k3s},
		{name: "--config file, space form",
			args:  []string{"--config", "/var/lib/kubelet/config.yaml"},
			files: map[string]string{"/var/lib/kubelet/config.yaml": cfg(k3s)}, want: k3s},
		{name: "--config file in JSON",
			args:  []string{"--config=/etc/kubernetes/kubelet.json"},
			files: map[string]string{"/etc/kubernetes/kubelet.json": `{"kind":"KubeletConfiguration","containerRuntimeEndpoint":"` + crio + `"}`},
			want:  crio},
		{name: "--config file that sets none: the default",
			args:  []string{"--config=/var/lib/kubelet/config.yaml"},
			files: map[string]string{"/var/lib/kubelet/config.yaml": noEndpoint}, want: kubeletDefaultEndpoint},
		{name: "--config-dir drop-ins: the last in lexical order wins",
			args: []string{"--config-dir=/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/etc/kubernetes/kubelet.conf.d/10-runtime.conf": cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/20-runtime.conf": cfg(k3s),
			}, want: k3s},
		{name: "--config-dir drop-ins override the --config file",
			args: []string{"--config", "/var/lib/kubelet/config.yaml", "--config-dir", "/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/var/lib/kubelet/config.yaml":                   cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/50-runtime.conf": cfg(k3s),
			}, want: k3s},
		{name: "a drop-in that sets none leaves the endpoint as it was",
			args: []string{"--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/var/lib/kubelet/config.yaml":                   cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/10-runtime.conf": cfg(k3s),
				"/etc/kubernetes/kubelet.conf.d/90-logging.conf": noEndpoint,
			}, want: k3s},
		{name: "files in the drop-in directory that are not *.conf are not the kubelet's",
			args: []string{"--config-dir=/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/etc/kubernetes/kubelet.conf.d/10-runtime.conf":     cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/99-runtime.yaml":     cfg(other),
				"/etc/kubernetes/kubelet.conf.d/99-runtime.conf.bak": cfg(other),
			}, want: crio},
		{name: "the flag beats the --config file and the drop-ins",
			args: []string{"--config=/var/lib/kubelet/config.yaml", "--container-runtime-endpoint=" + docker,
				"--config-dir=/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/var/lib/kubelet/config.yaml":                   cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/10-runtime.conf": cfg(k3s),
			}, want: docker},
		{name: "a relative --config path: the kubelet's working directory is unknown",
			args:  []string{"--config=config.yaml"},
			files: map[string]string{"config.yaml": cfg(crio)}, err: true, want: "not an absolute path"},
		{name: "a relative --config-dir: its drop-ins are relative",
			args:  []string{"--config-dir=kubelet.conf.d"},
			files: map[string]string{"kubelet.conf.d/10.conf": cfg(crio)}, err: true, want: "not an absolute path"},
		{name: "a --config file that is gone",
			args: []string{"--config=/var/lib/kubelet/config.yaml"}, err: true, want: "kubelet configuration"},
		{name: "a --config file that is not YAML",
			args:  []string{"--config=/var/lib/kubelet/config.yaml"},
			files: map[string]string{"/var/lib/kubelet/config.yaml": "containerRuntimeEndpoint: [unix:///run/crio/crio.sock\n"},
			err:   true, want: "/var/lib/kubelet/config.yaml"},
		{name: "a drop-in that is not YAML",
			args: []string{"--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d"},
			files: map[string]string{
				"/var/lib/kubelet/config.yaml":                   cfg(crio),
				"/etc/kubernetes/kubelet.conf.d/10-runtime.conf": "\tcontainerRuntimeEndpoint: {",
			}, err: true, want: "10-runtime.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readFile, glob := kubeletFiles(tc.files)
			got, err := kubeletEndpoint(append([]string{"/usr/bin/kubelet"}, tc.args...), readFile, glob)
			switch {
			case tc.err && err == nil:
				t.Fatalf("kubeletEndpoint = %q, want an error with %q", got, tc.want)
			case tc.err && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("kubeletEndpoint: %v, want %q in it", err, tc.want)
			case !tc.err && (err != nil || got != tc.want):
				t.Fatalf("kubeletEndpoint = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// kubeletFiles are a kubelet's configuration files as readKubeletSettings
// reads them, from files by path. glob answers in reverse order: the
// drop-ins' order must be the kubelet's, not whatever the directory listing
// gives.
func kubeletFiles(files map[string]string) (readFile func(string) ([]byte, error), glob func(string) ([]string, error)) {
	readFile = func(path string) ([]byte, error) {
		if data, ok := files[path]; ok {
			return []byte(data), nil
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	glob = func(pattern string) ([]string, error) {
		var m []string
		for path := range files {
			if ok, err := filepath.Match(pattern, path); err != nil {
				return nil, err
			} else if ok {
				m = append(m, path)
			}
		}
		slices.Sort(m)
		slices.Reverse(m)
		return m, nil
	}
	return readFile, glob
}

// TestKubeletPort pins which serving port a kubelet holds, by the
// kubelet's precedence: --port, else the last drop-in that sets port, else
// --config, else 10250. A port read wrong makes the real kubelet look like
// one that does not serve, or a stray one like the node's.
func TestKubeletPort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		files map[string]string
		want  int // 0: an error
	}{
		{"the default", []string{"--v=2"}, nil, 10250},
		{"--port", []string{"--port=10260"}, nil, 10260},
		{"--port, space form", []string{"--port", "10261"}, nil, 10261},
		{"--config", []string{"--config=/c.yaml"}, map[string]string{"/c.yaml": "port: 11250\n"}, 11250},
		{"a drop-in over --config", []string{"--config=/c.yaml", "--config-dir=/d"},
			map[string]string{"/c.yaml": "port: 11250\n", "/d/10.conf": "port: 12250\n"}, 12250},
		{"--port over the files", []string{"--config=/c.yaml", "--port=10262"}, map[string]string{"/c.yaml": "port: 11250\n"}, 10262},
		{"--port with the endpoint flag: the files still name nothing else", []string{"--port=10263", "--container-runtime-endpoint=unix:///x"}, nil, 10263},
		{"--port that is no port", []string{"--port=http"}, nil, 0},
		{"--port 0", []string{"--port=0"}, nil, 0},
		{"a configuration port out of range", []string{"--config=/c.yaml"}, map[string]string{"/c.yaml": "port: 70000\n"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readFile, glob := kubeletFiles(tc.files)
			got, err := readKubeletSettings(append([]string{"/usr/bin/kubelet"}, tc.args...), readFile, glob)
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("port %d, want an error", got.port)
				}
				return
			}
			if err != nil || got.port != tc.want {
				t.Fatalf("port %d, %v; want %d", got.port, err, tc.want)
			}
		})
	}
}

// TestListeners pins the reading of /proc/net/tcp: only a LISTEN socket on
// the port, in either table's address form.
func TestListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:280A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:280A 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:2808 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
   3: 00000000000000000000000000000000:280A 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0
   4: 00000000:280A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0 100 0 0 10 0
   5: garbage
`
	if got := listeners([]byte(table), 10250); !slices.Equal(got, []string{"111", "444"}) {
		t.Fatalf("listeners = %q, want [111 444]", got)
	}
	if got := listeners([]byte(table), 10248); !slices.Equal(got, []string{"333"}) {
		t.Fatalf("listeners on 10248 = %q, want [333]", got)
	}
}

// procStat is a /proc/PID/stat line as Linux writes it, with the start time
// (field 22) given.
func procStat(pid int, comm, start string) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 120453 0 71 0 12840 5467 0 0 20 0 17 0 %s 2186539008 23874 "+
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", pid, comm, pid, pid, start)
}

// TestStartTime pins the reading of a process's start time, field 22 of its
// stat, after a command name that may hold spaces and parentheses: a start
// time read from the wrong field would not see a PID reused.
func TestStartTime(t *testing.T) {
	for _, tc := range []struct {
		name, stat, want string
	}{
		{"plain", procStat(4242, "kubelet", "123456789"), "123456789"},
		{"a command name with spaces", procStat(4242, "kube let x", "42"), "42"},
		{"a command name with parentheses and spaces", procStat(4242, "a) (b 1 2 3) c", "77"), "77"},
		{"a command name that ends in a parenthesis", procStat(4242, "x)", "78"), "78"},
		{"too few fields", "4242 (kubelet) S 1 2 3\n", ""},
		{"no command name", "4242 kubelet S 1\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			if err := os.MkdirAll(filepath.Join(proc, "4242"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(proc, "4242", "stat"), []byte(tc.stat), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := startTime(proc, 4242)
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Fatalf("startTime = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// fakeProc is a /proc of a test's making.
type fakeProc struct {
	t   *testing.T
	dir string
}

func newFakeProc(t *testing.T) fakeProc {
	p := fakeProc{t: t, dir: t.TempDir()}
	// What a real /proc holds beside processes, which are no kubelet.
	for _, d := range []string{"sys", "net", "0"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("4242", filepath.Join(p.dir, "self")); err != nil {
		t.Fatal(err)
	}
	return p
}

// add makes process pid, named comm, started at start, with this command
// line: none is an empty cmdline, as a zombie's.
func (p fakeProc) add(pid int, comm, start string, args ...string) {
	p.t.Helper()
	dir := filepath.Join(p.dir, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	cmdline := ""
	if len(args) > 0 {
		cmdline = strings.Join(args, "\x00") + "\x00"
	}
	for name, data := range map[string]string{
		"comm":    comm + "\n",
		"cmdline": cmdline,
		"stat":    procStat(pid, comm, start),
		"status":  "Name:\t" + comm + "\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	p.setRoot(pid, "/")
	if comm == "kubelet" {
		p.serve(pid, kubeletDefaultPort)
	}
}

// serve makes process pid hold a listening TCP socket on port (0: none),
// as /proc/PID/net/tcp6 and /proc/PID/fd show it, beside a socket of
// another port and an established connection on port, which are not its
// serving port held.
func (p fakeProc) serve(pid, port int) {
	p.t.Helper()
	dir := filepath.Join(p.dir, strconv.Itoa(pid))
	for _, d := range []string{"net", "fd"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			p.t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			p.t.Fatal(err)
		}
	}
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	line := func(sl int, local string, lport int, remote string, st string, inode int) string {
		return fmt.Sprintf("%4d: %s:%04X %s %s 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n",
			sl, local, lport, remote, st, inode)
	}
	v4 := header + line(0, "0100007F", 10248, "00000000:0000", "0A", pid*10+1) + // healthz, another port
		line(1, "0100007F", kubeletDefaultPort, "0100007F:9C40", "01", pid*10+2) // a connection, not a listener
	v6 := header
	if port != 0 {
		v6 += line(0, "00000000000000000000000000000000", port, "00000000000000000000000000000000:0000", "0A", pid*10+3)
	}
	for name, data := range map[string]string{"net/tcp": v4, "net/tcp6": v6} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	for fd, target := range map[string]string{"0": "/dev/null", "3": fmt.Sprintf("socket:[%d]", pid*10+1),
		"4": fmt.Sprintf("socket:[%d]", pid*10+2), "7": fmt.Sprintf("socket:[%d]", pid*10+3), "8": "anon_inode:[eventpoll]"} {
		if err := os.Symlink(target, filepath.Join(dir, "fd", fd)); err != nil {
			p.t.Fatal(err)
		}
	}
}

// setRoot makes root the root directory of process pid, as its
// /proc/PID/root shows it: "/" for one that shares the test's.
func (p fakeProc) setRoot(pid int, root string) {
	p.t.Helper()
	link := filepath.Join(p.dir, strconv.Itoa(pid), "root")
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.t.Fatal(err)
	}
	if err := os.Symlink(root, link); err != nil {
		p.t.Fatal(err)
	}
}

// inRoot makes path, an absolute path, inside root, and its directory.
func inRoot(t *testing.T, root, path string) string {
	t.Helper()
	in := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		t.Fatal(err)
	}
	return in
}

// kubeletSockets are a machine's runtime sockets, as regular files (stat
// is all a witness does with them): ours, a symlink to it, and a file of the
// same name in another runtime's directory.
type kubeletSockets struct{ ours, link, sameName, missing string }

func newKubeletSockets(t *testing.T) kubeletSockets {
	dir := t.TempDir()
	s := kubeletSockets{
		ours:     filepath.Join(dir, "run", "containerd", "containerd.sock"),
		link:     filepath.Join(dir, "var", "run", "containerd", "containerd.sock"),
		sameName: filepath.Join(dir, "run", "k3s", "containerd", "containerd.sock"),
		missing:  filepath.Join(dir, "run", "crio", "crio.sock"),
	}
	for _, f := range []string{s.ours, s.sameName} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(s.link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.ours, s.link); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKubeletWitness pins, on a bare node, what proves that the runtime's
// socket is this machine's kubelet's: a process named kubelet runs whose
// runtime endpoint (command line, or configuration) is the same socket
// file as ours, whatever path it names it by. A socket of the same name in
// another runtime's directory (k3s's containerd beside Docker's) is
// another runtime; a process that is not the kubelet proves nothing, even
// when its command line names our socket.
func TestKubeletWitness(t *testing.T) {
	const kubelet = "/usr/bin/kubelet"
	for _, tc := range []struct {
		name string
		// procs adds processes; cfgDir holds configuration files it may
		// name.
		procs func(p fakeProc, s kubeletSockets, cfgDir string)
		// noSocket removes our socket before Prove.
		noSocket bool
		// unproven: the error must wrap ErrRuntimeUnproven; otherwise any
		// error must be a failure to ask. want gives what must be in the
		// error; nil for proven.
		unproven bool
		want     func(s kubeletSockets) []string
	}{
		{name: "the kubelet's flag names our socket",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(1, "systemd", "1", "/sbin/init")
				p.add(812, "containerd", "2100", "/usr/bin/containerd")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours, "--v=2")
			}},
		{name: "the kubelet's flag, space form, names our socket without unix://",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint", s.ours)
			}},
		{name: "the kubelet names our socket through a symlink",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.link)
			}},
		{name: "the kubelet's --config names our socket",
			procs: func(p fakeProc, s kubeletSockets, cfgDir string) {
				writeKubeletFile(p.t, filepath.Join(cfgDir, "config.yaml"), "containerRuntimeEndpoint: unix://"+s.ours+"\n")
				p.add(955, "kubelet", "2345", kubelet, "--config="+filepath.Join(cfgDir, "config.yaml"))
			}},
		{name: "the kubelet's drop-in names our socket over its --config",
			procs: func(p fakeProc, s kubeletSockets, cfgDir string) {
				writeKubeletFile(p.t, filepath.Join(cfgDir, "config.yaml"), "containerRuntimeEndpoint: unix://"+s.sameName+"\n")
				writeKubeletFile(p.t, filepath.Join(cfgDir, "conf.d", "10-runtime.conf"), "containerRuntimeEndpoint: unix://"+s.ours+"\n")
				p.add(955, "kubelet", "2345", kubelet, "--config", filepath.Join(cfgDir, "config.yaml"),
					"--config-dir", filepath.Join(cfgDir, "conf.d"))
			}},
		{name: "two kubelets, both use our socket by different paths",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.link)
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			}},
		{name: "two kubelets, one uses our socket, the other another runtime: which runs the node's pods is open",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(s kubeletSockets) []string {
				return []string{"kubelet pid 3001 uses the socket", "pid 955 uses unix://" + s.sameName, "several kubelets prove nothing"}
			}},
		{name: "a kubelet in another root names our socket's path: there it is another file",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				root := p.t.TempDir()
				writeKubeletFile(p.t, inRoot(p.t, root, s.ours), "")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.setRoot(955, root)
			},
			unproven: true, want: func(s kubeletSockets) []string { return []string{"pid 955 uses unix://" + s.ours} }},
		{name: "a kubelet in another root names our socket's path: there is none there",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.setRoot(955, p.t.TempDir())
			},
			unproven: true, want: func(s kubeletSockets) []string {
				return []string{"pid 955 uses unix://" + s.ours + ", no file in its root"}
			}},
		{name: "a kubelet in another root: an absolute symlink there resolves inside that root",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				root := p.t.TempDir()
				writeKubeletFile(p.t, inRoot(p.t, root, s.ours), "")
				if err := os.Symlink(s.ours, inRoot(p.t, root, s.link)); err != nil {
					p.t.Fatal(err)
				}
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.link)
				p.setRoot(955, root)
			},
			unproven: true, want: func(s kubeletSockets) []string { return []string{"pid 955 uses unix://" + s.link} }},
		{name: "a kubelet in another root whose socket there is ours (a bind mount, here a hard link)",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				root := p.t.TempDir()
				if err := os.Link(s.ours, inRoot(p.t, root, "/run/containerd/containerd.sock")); err != nil {
					p.t.Fatal(err)
				}
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix:///run/containerd/containerd.sock")
				p.setRoot(955, root)
			}},
		{name: "a kubelet in another root: its --config is read in that root",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				root := p.t.TempDir()
				if err := os.Link(s.ours, inRoot(p.t, root, "/run/k3s/containerd/containerd.sock")); err != nil {
					p.t.Fatal(err)
				}
				// Outside its root, the same path names another runtime.
				writeKubeletFile(p.t, "/"+filepath.Join(p.t.TempDir(), "config.yaml"), "")
				writeKubeletFile(p.t, inRoot(p.t, root, "/var/lib/kubelet/config.yaml"),
					"containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n")
				writeKubeletFile(p.t, inRoot(p.t, root, "/etc/kubernetes/kubelet.conf.d/10-runtime.conf"), "cgroupDriver: systemd\n")
				p.add(955, "kubelet", "2345", kubelet, "--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d")
				p.setRoot(955, root)
			}},
		{name: "a process named kubelet of another user proves nothing",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				writeKubeletFile(p.t, filepath.Join(p.dir, "955", "status"), "Name:\tkubelet\nUid:\t1000\t1000\t1000\t1000\n")
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"no kubelet process"} }},
		{name: "nor does it refuse beside the root kubelet",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
				writeKubeletFile(p.t, filepath.Join(p.dir, "3001", "status"), "Name:\tkubelet\nUid:\t0\t1000\t0\t0\n")
			}},
		{name: "a kubelet whose root cannot be opened: named, and no proof",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.setRoot(955, filepath.Join(p.t.TempDir(), "gone"))
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"pid 955: its root"} }},
		{name: "the kubelet uses a socket of the same name in another directory",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
			},
			unproven: true, want: func(s kubeletSockets) []string { return []string{"pid 955 uses unix://" + s.sameName} }},
		{name: "two kubelets, both use other sockets: both named",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.missing)
			},
			unproven: true, want: func(s kubeletSockets) []string {
				return []string{"pid 955 uses unix://" + s.sameName, "pid 3001 uses unix://" + s.missing}
			}},
		{name: "the kubelet's configuration cannot be read: named",
			procs: func(p fakeProc, _ kubeletSockets, cfgDir string) {
				writeKubeletFile(p.t, filepath.Join(cfgDir, "config.yaml"), "containerRuntimeEndpoint: [\n")
				p.add(955, "kubelet", "2345", kubelet, "--config="+filepath.Join(cfgDir, "config.yaml"))
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"pid 955: kubelet configuration"} }},
		{name: "the kubelet's endpoint is no unix socket: named",
			procs: func(p fakeProc, _ kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=tcp://127.0.0.1:3735")
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"pid 955: runtime endpoint"} }},
		{name: "no kubelet: other processes, one naming our socket, prove nothing",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(1, "systemd", "1", "/sbin/init")
				p.add(812, "containerd", "2100", "/usr/bin/containerd", "--address", s.ours)
				p.add(900, "kube-proxy", "2200", "/usr/local/bin/kube-proxy")
				p.add(901, "sh", "2201", "/bin/sh", "-c", kubelet+" --container-runtime-endpoint=unix://"+s.ours)
				p.add(902, "kubelet-wrapper", "2202", "/usr/bin/kubelet-wrapper", "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"no kubelet process"} }},
		{name: "a kubelet gone while it was looked at (no stat) is no kubelet",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				if err := os.Remove(filepath.Join(p.dir, "955", "stat")); err != nil {
					p.t.Fatal(err)
				}
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"no kubelet process"} }},
		// A zombie's command line is empty: read as a kubelet without
		// flags it would name the default endpoint, though it runs nothing.
		{name: "a kubelet with an empty command line (a zombie) is no kubelet",
			procs: func(p fakeProc, _ kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345")
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"no kubelet process"} }},
		{name: "a zombie kubelet beside a live one: only the live one is named",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345")
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
			},
			unproven: true, want: func(s kubeletSockets) []string { return []string{"(pid 3001 uses unix://" + s.sameName + ")"} }},
		// Issue 50: a kubelet.service left over from before a move to
		// k3s crash-loops on the port k3s holds, naming the system
		// containerd's socket; k3s's own kubelet runs inside it.
		{name: "k3s's server runs the kubelet; a left-over kubelet names our socket: no proof",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(700, "k3s-server", "100", "/usr/local/bin/k3s", "server")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.serve(955, 0)
			},
			unproven: true, want: func(kubeletSockets) []string {
				return []string{"pid 700 (/usr/local/bin/k3s server) runs a kubelet inside it", "use --liveness=api"}
			}},
		{name: "k3s's agent, under its own name: no proof even beside a serving kubelet",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(700, "k3s", "100", "/usr/local/bin/k3s", "agent", "--server=https://10.0.0.1:6443")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(kubeletSockets) []string {
				return []string{"pid 700 (/usr/local/bin/k3s agent) runs a kubelet inside it"}
			}},
		{name: "MicroK8s's kubelite: no proof",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(700, "kubelite", "100", "/snap/microk8s/current/kubelite", "--scheduler-args-file=/x")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"pid 700", "kubelite", "runs a kubelet inside it"} }},
		{name: "hyperkube kubelet: no proof",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(700, "hyperkube", "100", "/hyperkube", "kubelet", "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(kubeletSockets) []string {
				return []string{"pid 700 (/hyperkube kubelet) runs a kubelet inside it"}
			}},
		{name: "k3s kubectl, hyperkube kube-apiserver and a k3s of another user run no kubelet",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(700, "k3s", "100", "/usr/local/bin/k3s", "kubectl", "get", "pods")
				p.add(701, "hyperkube", "101", "/hyperkube", "kube-apiserver")
				p.add(702, "k3s-server", "102", "/usr/local/bin/k3s", "server")
				writeKubeletFile(p.t, filepath.Join(p.dir, "702", "status"), "Name:\tk3s-server\nUid:\t1000\t1000\t1000\t1000\n")
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			}},
		{name: "a kubelet that holds no listener on its serving port (crash-looping, or starting) proves nothing",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.serve(955, 0)
			},
			unproven: true, want: func(kubeletSockets) []string {
				return []string{"pid 955 uses", "holds no listening socket on its serving port 10250", "not the node's serving kubelet"}
			}},
		{name: "nor does a serving kubelet beside it make it prove: the serving one uses another runtime",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				p.serve(955, 0)
				p.add(3001, "kubelet", "9999", kubelet, "--container-runtime-endpoint=unix://"+s.sameName)
			},
			unproven: true, want: func(s kubeletSockets) []string {
				return []string{"not the node's serving kubelet", "pid 3001 uses unix://" + s.sameName}
			}},
		{name: "its listener on another port than its --port",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--port=10260", "--container-runtime-endpoint=unix://"+s.ours)
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"serving port 10260"} }},
		{name: "its --port held",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--port", "10260", "--container-runtime-endpoint=unix://"+s.ours)
				p.serve(955, 10260)
			}},
		{name: "its configuration's port held",
			procs: func(p fakeProc, s kubeletSockets, cfgDir string) {
				writeKubeletFile(p.t, filepath.Join(cfgDir, "config.yaml"), "port: 11250\ncontainerRuntimeEndpoint: unix://"+s.ours+"\n")
				p.add(955, "kubelet", "2345", kubelet, "--config="+filepath.Join(cfgDir, "config.yaml"))
				p.serve(955, 11250)
			}},
		{name: "the listener is in its network namespace but another process holds it",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				if err := os.Remove(filepath.Join(p.dir, "955", "fd", "7")); err != nil {
					p.t.Fatal(err)
				}
			},
			unproven: true, want: func(kubeletSockets) []string { return []string{"holds no listening socket on its serving port 10250"} }},
		{name: "its descriptors cannot be read: named, and no proof",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
				if err := os.RemoveAll(filepath.Join(p.dir, "955", "fd")); err != nil {
					p.t.Fatal(err)
				}
			},
			unproven: true, want: func(kubeletSockets) []string {
				return []string{"whether it holds its serving port 10250 cannot be read"}
			}},
		{name: "our socket is gone: a failure to ask",
			procs: func(p fakeProc, s kubeletSockets, _ string) {
				p.add(955, "kubelet", "2345", kubelet, "--container-runtime-endpoint=unix://"+s.ours)
			},
			noSocket: true, want: func(kubeletSockets) []string { return []string{"container runtime socket"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := newFakeProc(t), newKubeletSockets(t)
			tc.procs(p, s, t.TempDir())
			if tc.noSocket {
				if err := os.Remove(s.ours); err != nil {
					t.Fatal(err)
				}
			}
			w := &kubeletWitness{socket: s.ours, proc: p.dir}
			err := w.Prove(t.Context(), Evidence{})
			if tc.want == nil {
				if err != nil || !w.Holds() {
					t.Fatalf("Prove: %v, Holds %v; want proven", err, w.Holds())
				}
				return
			}
			want := tc.want(s)
			switch {
			case err == nil:
				t.Fatalf("Prove: proven, want %q", want)
			case errors.Is(err, ErrRuntimeUnproven) != tc.unproven:
				t.Fatalf("Prove: %v: a failed proof %v, want %v", err, !tc.unproven, tc.unproven)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Prove: %v, want %q in it", err, w)
				}
			}
			if w.Holds() {
				t.Error("Holds after a failed Prove")
			}
		})
	}
}

// TestKubeletWitnessHolds pins that a proof lasts only while the kubelet
// proven runs: a PID that another process took (its start time differs)
// or a process that is gone stops a run within holdRecheck; and a later
// Prove that fails drops the proof at once.
func TestKubeletWitnessHolds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(p fakeProc, s kubeletSockets)
		// reprove proves again after the change; wait waits out
		// holdRecheck before asking Holds.
		reprove, wait, holds bool
	}{
		{name: "the kubelet still runs", wait: true, holds: true,
			change: func(fakeProc, kubeletSockets) {}},
		{name: "its PID reused: another start time", wait: true,
			change: func(p fakeProc, s kubeletSockets) {
				p.add(955, "kubelet", "7777", "/usr/bin/kubelet", "--container-runtime-endpoint=unix://"+s.ours)
			}},
		{name: "it is gone", wait: true,
			change: func(p fakeProc, _ kubeletSockets) {
				if err := os.RemoveAll(filepath.Join(p.dir, "955")); err != nil {
					p.t.Fatal(err)
				}
			}},
		{name: "a later Prove that fails drops the proof at once", reprove: true,
			change: func(p fakeProc, s kubeletSockets) {
				p.add(955, "kubelet", "2345", "/usr/bin/kubelet", "--container-runtime-endpoint=unix://"+s.sameName)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out holdRecheck
			p, s := newFakeProc(t), newKubeletSockets(t)
			p.add(955, "kubelet", "2345", "/usr/bin/kubelet", "--container-runtime-endpoint=unix://"+s.ours)
			w := &kubeletWitness{socket: s.ours, proc: p.dir}
			if w.Holds() {
				t.Fatal("Holds before any Prove")
			}
			if err := w.Prove(t.Context(), Evidence{}); err != nil || !w.Holds() {
				t.Fatalf("Prove: %v, Holds %v", err, w.Holds())
			}
			tc.change(p, s)
			if tc.reprove {
				if err := w.Prove(t.Context(), Evidence{}); err == nil {
					t.Fatal("Prove after the change: proven")
				}
			}
			if tc.wait {
				time.Sleep(holdRecheck + 50*time.Millisecond)
			}
			if got := w.Holds(); got != tc.holds {
				t.Fatalf("Holds %v, want %v", got, tc.holds)
			}
		})
	}
}

func writeKubeletFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHoldsListenerReal reads this process's own descriptors and network
// namespace in the real /proc: a listening socket it holds is found on its
// port, on no other, and not once it is closed.
func TestHoldsListenerReal(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			l, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s here: %v", network, err) // a machine without IPv6
			}
			port := l.Addr().(*net.TCPAddr).Port
			start, err := startTime(DefaultProc, os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			self := kubeletProcess{pid: os.Getpid(), start: start}
			if ok, err := holdsListener(DefaultProc, self, port); err != nil || !ok {
				t.Fatalf("holdsListener(%d) = %v, %v; want true", port, ok, err)
			}
			if ok, err := holdsListener(DefaultProc, self, port+1); err != nil || ok {
				t.Fatalf("holdsListener(%d) = %v, %v; want false", port+1, ok, err)
			}
			if ok, _ := holdsListener(DefaultProc, kubeletProcess{pid: self.pid, start: "1"}, port); ok {
				t.Fatal("held by a process of another start time")
			}
			_ = l.Close()
			if ok, err := holdsListener(DefaultProc, self, port); err != nil || ok {
				t.Fatalf("after Close: holdsListener = %v, %v; want false", ok, err)
			}
		})
	}
}
