package liveness

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
)

// Sandbox IDs of these tests: 64 lowercase hex digits, as runtimes make them.
var (
	sbOwn   = strings.Repeat("0a1b2c3d", 8) // the sandbox sweepd's container runs in
	sbOld   = strings.Repeat("9e8f7a6b", 8) // an older sandbox of the same pod
	sbOther = strings.Repeat("5c4d3e2f", 8) // another pod's
	// A Docker container's ID, or an anonymous volume's name: as long as
	// a sandbox's.
	sbDocker = strings.Repeat("d0c4e700", 8)
)

// The mountinfo of a container of sweepd's pod, line by line as the kernel
// writes them: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] -
// FSTYPE SOURCE SUPEROPTIONS.
const (
	miRoot = "1411 1391 0:123 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/containerd/" +
		"io.containerd.snapshotter.v1.overlayfs/snapshots/52/fs,upperdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/" +
		"snapshots/61/fs,workdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/61/work"
	miProc = "1412 1411 0:127 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw"
	// The kubelet, not the runtime, writes /etc/hosts and the termination
	// log, in the pod's directory, named by the pod's UID.
	miHosts = "1430 1411 253:1 /var/lib/kubelet/pods/6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0/etc-hosts /etc/hosts rw,relatime - ext4 /dev/vda1 rw"
	miTerm  = "1431 1411 253:1 /var/lib/kubelet/pods/6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0/containers/sweepd/8c1d2e3f /dev/termination-log " +
		"rw,relatime - ext4 /dev/vda1 rw"
)

// containerdMount is a mount of a containerd sandbox's file, with /var/lib on
// the root filesystem.
func containerdMount(id, file, mountPoint string) string {
	return "1432 1411 253:1 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + id + "/" + file + " " + mountPoint +
		" rw,relatime - ext4 /dev/vda1 rw,discard"
}

// mountInfo joins mountinfo lines as the kernel writes them.
func mountInfo(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// TestOwnSandboxIDs pins which mounts name this process's own sandbox: the
// runtime's bind mounts of /etc/hostname and /etc/resolv.conf from the
// sandbox's directory, as containerd and CRI-O lay them out, read from the
// root field (relative to the filesystem mounted, so /var/lib on its own
// disk starts at /containerd). An ID in a mount elsewhere is not the
// sandbox's: a hostPath /data of some sandbox's directory, or the host's
// own files, must not pass for it.
func TestOwnSandboxIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		info string
		want []string
	}{
		{"containerd, /var/lib on the root filesystem", mountInfo(miRoot, miProc,
			containerdMount(sbOwn, "hostname", "/etc/hostname"), miHosts,
			containerdMount(sbOwn, "resolv.conf", "/etc/resolv.conf"), miTerm), []string{sbOwn}},
		{"containerd, /var/lib on its own filesystem: the root starts at /containerd", mountInfo(miRoot,
			"1432 1411 253:16 /containerd/io.containerd.grpc.v1.cri/sandboxes/"+sbOwn+"/hostname /etc/hostname rw,relatime - xfs /dev/vdb rw",
			"1433 1411 253:16 /containerd/io.containerd.grpc.v1.cri/sandboxes/"+sbOwn+"/resolv.conf /etc/resolv.conf rw,relatime - xfs /dev/vdb rw"),
			[]string{sbOwn}},
		{"CRI-O, the sandbox's userdata on the root filesystem", mountInfo(miRoot,
			"2045 2030 253:1 /run/containers/storage/overlay-containers/"+sbOwn+"/userdata/hostname /etc/hostname rw,nosuid,nodev - ext4 /dev/vda1 rw",
			"2046 2030 253:1 /run/containers/storage/overlay-containers/"+sbOwn+"/userdata/resolv.conf /etc/resolv.conf "+
				"rw,nosuid,nodev,noexec - ext4 /dev/vda1 rw"),
			[]string{sbOwn}},
		{"CRI-O, /run a tmpfs: the root starts at /containers", mountInfo(miRoot,
			"2045 2030 0:25 /containers/storage/overlay-containers/"+sbOwn+"/userdata/hostname /etc/hostname "+
				"rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=1611364k,mode=755,inode64"),
			[]string{sbOwn}},
		{"a path with escaped spaces", mountInfo(miRoot,
			`1432 1411 253:1 /mnt/data\040disk/containerd/io.containerd.grpc.v1.cri/sandboxes/`+sbOwn+`/hostname /etc/hostname rw - ext4 /dev/vdc rw`),
			[]string{sbOwn}},
		{"a host's /etc/hostname, mounted from nothing", mountInfo(miRoot, miProc,
			"25 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
			"26 25 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw"), nil},
		{"a sandbox's directory on an unrelated mount point does not count", mountInfo(miRoot,
			containerdMount(sbOther, "hostname", "/data"),
			containerdMount(sbOther, "resolv.conf", "/data/resolv.conf"),
			containerdMount(sbOther, "hostname", "/etc/hostname.d")), nil},
		{"an unrelated mount beside the own sandbox's does not count", mountInfo(miRoot,
			containerdMount(sbOther, "hostname", "/data"),
			containerdMount(sbOwn, "hostname", "/etc/hostname")), []string{sbOwn}},
		{"the kubelet's /etc/hosts names a pod UID, not a sandbox", mountInfo(miRoot, miHosts, miTerm), nil},
		{"one sandbox through three files: listed once", mountInfo(miRoot,
			containerdMount(sbOwn, "hostname", "/etc/hostname"),
			containerdMount(sbOwn, "hosts", "/etc/hosts"),
			containerdMount(sbOwn, "resolv.conf", "/etc/resolv.conf")), []string{sbOwn}},
		// Which comes first names the sandbox in a failed proof's message:
		// /etc/hostname's, however the mounts are ordered.
		{"two sandboxes through different files: both, /etc/hostname's first", mountInfo(miRoot,
			containerdMount(sbOld, "resolv.conf", "/etc/resolv.conf"),
			containerdMount(sbOwn, "hostname", "/etc/hostname")), []string{sbOwn, sbOld}},
		// A file mounted over is not what the process sees: of the mounts
		// on one file, only the last (the top one) names its sandbox.
		{"a file mounted over: only the last mount on it counts", mountInfo(miRoot,
			containerdMount(sbOld, "hostname", "/etc/hostname"),
			containerdMount(sbOwn, "hostname", "/etc/hostname")), []string{sbOwn}},
		// A node that is itself a container (kind) has its own
		// /etc/hostname from Docker: the pod's container sees the pod
		// sandbox's, mounted over it.
		{"a machine that is itself a container: the pod's mounts over its own", mountInfo(miRoot,
			"612 590 253:1 /var/lib/docker/containers/"+sbDocker+"/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/vda1 rw",
			"613 590 253:1 /var/lib/docker/containers/"+sbDocker+"/hostname /etc/hostname rw,relatime - ext4 /dev/vda1 rw",
			"614 590 253:1 /var/lib/docker/containers/"+sbDocker+"/hosts /etc/hosts rw,relatime - ext4 /dev/vda1 rw",
			containerdMount(sbOwn, "hostname", "/etc/hostname"),
			containerdMount(sbOwn, "resolv.conf", "/etc/resolv.conf"),
			miHosts), []string{sbOwn}},
		{"upper case hex is no runtime's ID", mountInfo(
			containerdMount(strings.ToUpper(sbOwn), "hostname", "/etc/hostname")), nil},
		{"63 hex digits are no ID", mountInfo(
			containerdMount(sbOwn[1:], "hostname", "/etc/hostname")), nil},
		{"short and empty lines are skipped", "\n1432 1411 253:1\n" + containerdMount(sbOwn, "hostname", "/etc/hostname") + "\n\n",
			[]string{sbOwn}},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, id := range ownSandboxIDs([]byte(tc.info)) {
				got = append(got, id.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ownSandboxIDs = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUnescapeMount pins the undoing of mountinfo's octal escapes, and that
// what is not a whole escape is left as it is.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/etc/hostname":           "/etc/hostname",
		`/mnt/a\040b`:             "/mnt/a b",
		`/mnt/a\011b\012c\134d`:   "/mnt/a\tb\nc\\d",
		`\040`:                    " ",
		`/mnt/a\04`:               `/mnt/a\04`,
		`/mnt/a\0`:                `/mnt/a\0`,
		`/mnt/a\`:                 `/mnt/a\`,
		`/mnt/a\089`:              `/mnt/a\089`,
		`/mnt/a\\040`:             `/mnt/a\ `,
		`/mnt/\040\040/x\040y\04`: `/mnt/  /x y\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzOwnSandboxIDs: the parser of a file the kernel writes, which an
// unusual mount can make odd, never panics, and returns only valid sandbox
// IDs, each once, each found in the (unescaped) text it was given.
func FuzzOwnSandboxIDs(f *testing.F) {
	for _, seed := range []string{
		mountInfo(miRoot, miProc, containerdMount(sbOwn, "hostname", "/etc/hostname"), miHosts),
		mountInfo("2045 2030 0:25 /containers/storage/overlay-containers/" + sbOwn + "/userdata/hostname /etc/hostname rw - tmpfs tmpfs rw"),
		mountInfo(`1432 1411 253:1 /mnt/a\040b/sandboxes/` + sbOwn + `/hostname /etc/hostname rw - ext4 /dev/vdc rw`),
		mountInfo(containerdMount(sbOwn, "hostname", "/etc/hostname"), containerdMount(sbOld, "resolv.conf", `/etc/resolv\056conf`)),
		mountInfo(containerdMount(sbOther, "hostname", "/data")),
		"1 2 3 " + sbOwn + " /etc/hosts",
		"",
		"\\",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ids := ownSandboxIDs(data)
		text := unescapeMount(string(data))
		for i, id := range ids {
			s := id.String()
			if back, ok := cachefile.ParseSandboxID(s); !ok || back != id {
				t.Fatalf("result %d %q is no sandbox ID", i, s)
			}
			if slices.Contains(ids[:i], id) {
				t.Fatalf("result %q listed twice: %v", s, ids)
			}
			if !strings.Contains(text, s) {
				t.Fatalf("result %q is not in the mountinfo given", s)
			}
		}
	})
}

// sandboxAnswer is what fakecri, holding these sandboxes, answers a real
// CRI client.
func sandboxAnswer(t *testing.T, setup func(*fakecri.Server)) *RuntimeAnswer {
	t.Helper()
	srv := fakecri.Start(t)
	setup(srv)
	c, err := cri.New(srv.Endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Sandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return &RuntimeAnswer{Endpoint: srv.Endpoint, Name: "fakecri", Version: "0.0.0", Sandboxes: l}
}

// TestOwnSandboxWitness pins, in a pod, what proves that the runtime is
// the one that runs this very process: it lists READY, for this pod's UID,
// the sandbox whose directory this process's /etc/hostname comes from. A
// DaemonSet pod keeps its UID across a move to another runtime, so an old
// runtime may still list a sandbox of the UID, even READY: only the ID,
// which the runtime that made this process's sandbox chose, tells them
// apart.
func TestOwnSandboxWitness(t *testing.T) {
	// fakecri's Add gives a sandbox the pod UID "uid-" and its ID's first 8
	// digits: this pod's UID is that of sbOld, so that a NOTREADY sandbox
	// of it can be listed.
	uid := "uid-" + sbOld[:8]
	ownMounts := mountInfo(miRoot, miProc, containerdMount(sbOwn, "hostname", "/etc/hostname"), miHosts,
		containerdMount(sbOwn, "resolv.conf", "/etc/resolv.conf"), miTerm)
	kindMount := func(file, mountPoint string) string {
		return "1432 1411 254:1 /var/lib/docker/volumes/" + sbDocker + "/_data/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" +
			sbOwn + "/" + file + " " + mountPoint + " rw,relatime - ext4 /dev/vda1 rw"
	}
	kindMounts := mountInfo(miRoot, kindMount("hostname", "/etc/hostname"), miHosts, kindMount("resolv.conf", "/etc/resolv.conf"))
	for _, tc := range []struct {
		name      string
		mounts    string // "": no mountinfo file at all
		sandboxes func(*fakecri.Server)
		want      string // "": proven; otherwise in the ErrRuntimeUnproven error
	}{
		{"own sandbox READY for the pod's UID", ownMounts, func(s *fakecri.Server) {
			s.AddPod(sbOther, "uid-of-another-pod")
			s.AddPod(sbOwn, uid)
		}, ""},
		{"own sandbox READY, with an old one of the pod beside it", ownMounts, func(s *fakecri.Server) {
			s.Add(sbOld, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			s.AddPod(sbOwn, uid)
		}, ""},
		{"only an old sandbox of the pod, READY: an old runtime", ownMounts, func(s *fakecri.Server) {
			s.AddPod(sbOld, uid)
			s.AddPod(sbOther, "uid-of-another-pod")
		}, "only other sandboxes of this pod"},
		{"only an old sandbox of the pod, NOTREADY: an old runtime", ownMounts, func(s *fakecri.Server) {
			s.Add(sbOld, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
			s.AddPod(sbOther, "uid-of-another-pod")
		}, "only other sandboxes of this pod"},
		{"no sandbox of the pod at all", ownMounts, func(s *fakecri.Server) {
			s.AddPod(sbOther, "uid-of-another-pod")
		}, "no sandbox of this pod"},
		{"own sandbox NOTREADY: not the sandbox this live process runs in", mountInfo(
			containerdMount(sbOld, "hostname", "/etc/hostname")), func(s *fakecri.Server) {
			s.Add(sbOld, runtimeapi.PodSandboxState_SANDBOX_NOTREADY) // of uid, see above
			s.AddPod(sbOther, "uid-of-another-pod")
		}, "not " + sbOld + " READY"},
		{"own sandbox's ID READY for another pod's UID", ownMounts, func(s *fakecri.Server) {
			s.AddPod(sbOwn, "uid-of-another-pod")
		}, "not " + sbOwn + " READY for pod UID " + uid},
		{"no mount from a sandbox: not in a pod", mountInfo(miRoot, miProc,
			"25 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw"), func(s *fakecri.Server) {
			s.AddPod(sbOwn, uid)
		}, "--pod-uid"},
		{"a sandbox's directory on another mount point: not in a pod", mountInfo(miRoot,
			containerdMount(sbOwn, "hostname", "/data")), func(s *fakecri.Server) {
			s.AddPod(sbOwn, uid)
		}, "--pod-uid"},
		{"mounts unreadable", "", func(s *fakecri.Server) { s.AddPod(sbOwn, uid) }, "cannot read this process's mounts"},
		// In a kind node, /var is a Docker volume named by 64 hex digits,
		// and the roots of the pod's mounts are paths on the host's disk
		// that hold that name before the sandbox's ID.
		{"a kind node: its /var volume's name in the roots is no obstacle", kindMounts, func(s *fakecri.Server) {
			s.AddPod(sbOwn, uid)
		}, ""},
		// A failed proof names the sandbox this process runs in, so that an
		// operator can look for it: not the kind node's volume.
		{"a kind node, own sandbox not listed: its ID named, not the volume's", kindMounts, func(s *fakecri.Server) {
			s.AddPod(sbOther, "uid-of-another-pod")
		}, "not " + sbOwn + " READY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mountinfo")
			if tc.mounts != "" {
				if err := os.WriteFile(path, []byte(tc.mounts), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			w := ownSandboxWitness{uid: uid, mountInfo: path}
			err := w.Prove(t.Context(), Evidence{Runtime: sandboxAnswer(t, tc.sandboxes)})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Prove: %v, want proven", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("Prove: proven, want %q", tc.want)
			case !errors.Is(err, ErrRuntimeUnproven):
				t.Fatalf("Prove: %v, want a failed proof (ErrRuntimeUnproven)", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Prove: %v, want %q in it", err, tc.want)
			}
		})
	}
}
