package prune_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// reservationTree is a node with a multus cache and a host-local data
// directory of one network, "net1", as host-local leaves them.
type reservationTree struct {
	multus, data, net string
	// Sandboxes: live is known to the runtime; named is dead but a results
	// file of a live pod still names it; young and old are dead and named
	// by nothing, reserved recently and long ago.
	live, named, young, old string
	pods                    *prune.PodSet
}

func newReservationTree(t *testing.T) *reservationTree {
	t.Helper()
	root := t.TempDir()
	rt := &reservationTree{
		multus: filepath.Join(root, "multus"), data: filepath.Join(root, "networks"),
		live: multuscache.NewSandboxID(), named: multuscache.NewSandboxID(),
		young: multuscache.NewSandboxID(), old: multuscache.NewSandboxID(),
	}
	rt.net = filepath.Join(rt.data, "net1")
	if err := os.MkdirAll(rt.net, 0o755); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	// The named sandbox's pod is live in the API server: with --liveness=both
	// its results file stays, and a DEL replay of it is the release.
	web := multuscache.Pod{Namespace: "default", Name: "web", UID: multuscache.UID("web")}
	rt.pods = prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "web", UID: web.UID}})
	if _, err := multuscache.Sandbox(rt.multus, rt.named, web, multuscache.DefaultAttachments(), hourAgo); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		ip, id string
		mtime  time.Time
	}{
		{"10.1.0.2", rt.live, hourAgo},
		{"10.1.0.3", rt.named, hourAgo},
		{"10.1.0.4", rt.young, time.Now()},
		{"10.1.0.5", rt.old, hourAgo},
	} {
		writeReservation(t, rt.net, r.ip, r.id+"\r\nnet1", r.mtime)
	}
	writeReservation(t, rt.net, "lock", "", hourAgo)
	writeReservation(t, rt.net, "last_reserved_ip.0", "10.1.0.5", hourAgo)
	return rt
}

func writeReservation(t *testing.T, dir, name, content string, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// left lists the entries of the network directory.
func (rt *reservationTree) left(t *testing.T) string {
	t.Helper()
	var names []string
	for _, e := range entries(t, rt.net) {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func (rt *reservationTree) opts(live ...string) runArgs {
	return runArgs{
		Options: prune.Options{Config: prune.Config{Dir: rt.multus, MinAge: 15 * time.Minute, HostLocalDirs: []string{rt.data},
			HostLocalNetworks: []string{"net1"}, HostLocalLockWait: 2 * time.Second}},
		Views: prune.Views{Pods: rt.pods, Sandboxes: newSandboxes(append([]string{rt.live}, live...)...)},
	}
}

func TestRunReleasesReservations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, rt *reservationTree, o *runArgs)
		criAlone bool // no pod liveness: the runtime decides the cache files too
		released int
		left     string
		kept     map[prune.Reason]int
		check    func(t *testing.T, rt *reservationTree)
	}{{
		name:     "only the old orphan goes",
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "dry run removes nothing",
		setup: func(_ *testing.T, _ *reservationTree, o *runArgs) {
			o.DryRun = true
		},
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "a scratch file alone names its sandbox",
		setup: func(t *testing.T, rt *reservationTree, _ *runArgs) {
			// Young, so the prune keeps it (a failed ADD's leftover).
			writeReservation(t, rt.multus, rt.old, "{}", time.Now())
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 2, prune.ReasonTooYoung: 1},
	}, {
		name: "a runtime cache file names its sandbox",
		// The runtime's own cache (--runtime-cache-dir) is a cache too: its
		// file of the old sandbox's pod, live in the API server, stays, and
		// its DEL replay is the release.
		setup: func(t *testing.T, rt *reservationTree, o *runArgs) {
			o.RuntimeDir = runtimeCacheOf(t, rt, rt.old)
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 2, prune.ReasonTooYoung: 1},
	}, {
		name: "a runtime cache file names its sandbox when multus has no results directory",
		// Without multus's results/ (multus before v3.7.2) the boot record
		// gets no list of the sandboxes the results name; the reservations
		// still must know the runtime's files.
		setup: func(t *testing.T, rt *reservationTree, o *runArgs) {
			if err := os.RemoveAll(filepath.Join(rt.multus, "results")); err != nil {
				t.Fatal(err)
			}
			o.RuntimeDir = runtimeCacheOf(t, rt, rt.old)
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		// The named sandbox's scratch file stays (no-results-dir) and names it.
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 2, prune.ReasonTooYoung: 1},
	}, {
		name: "a runtime cache file the prune removes names nothing",
		setup: func(t *testing.T, rt *reservationTree, o *runArgs) {
			o.RuntimeDir = runtimeCacheOf(t, rt, rt.old)
		},
		criAlone: true,
		released: 2,
		left:     "10.1.0.2 10.1.0.4 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "a file the prune removes names nothing",
		// With the pods' view the named sandbox's files stay; the runtime
		// alone condemns them, and then its reservation.
		criAlone: true,
		released: 2,
		left:     "10.1.0.2 10.1.0.4 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "a dry run with DEL replay leaves its DELs their reservations",
		// A real run would DEL the named sandbox's files, and host-local's
		// DEL would release its reservation, or a failed DEL keep the files:
		// the dry run's count must not claim that reservation as its own.
		criAlone: true,
		setup: func(_ *testing.T, _ *reservationTree, o *runArgs) {
			o.DryRun, o.Release = true, slowReleaser{}
		},
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "legacy content, the ID alone",
		setup: func(t *testing.T, rt *reservationTree, _ *runArgs) {
			writeReservation(t, rt.net, "10.1.0.5", rt.old, time.Now().Add(-time.Hour))
		},
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1},
	}, {
		name: "a symlink, unknown names and contents are kept",
		setup: func(t *testing.T, rt *reservationTree, _ *runArgs) {
			hourAgo := time.Now().Add(-time.Hour)
			target := filepath.Join(t.TempDir(), "target")
			writeReservation(t, filepath.Dir(target), "target", multuscache.NewSandboxID()+"\r\nnet1", hourAgo)
			if err := os.Symlink(target, filepath.Join(rt.net, "10.1.0.9")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(rt.net, filepath.Join(rt.data, "net-link")); err != nil {
				t.Fatal(err)
			}
			writeReservation(t, rt.net, "notes.txt", multuscache.NewSandboxID(), hourAgo)
			writeReservation(t, rt.net, "10.1.0.300", multuscache.NewSandboxID(), hourAgo)
			writeReservation(t, rt.net, "10.1.0.10", multuscache.NewSandboxID()+"\nnet1\nmore", hourAgo)
			writeReservation(t, rt.net, "10.1.0.11", "", hourAgo)
			// nerdctl's: its OCI hook passes CNI <namespace>-<container ID>,
			// which is no sandbox ID. (A podman container's is 64 hex
			// digits like a sandbox's: only the network list keeps it.)
			writeReservation(t, rt.net, "10.1.0.12", "default-"+multuscache.NewSandboxID()+"\r\neth0", hourAgo)
			if err := os.Mkdir(filepath.Join(rt.net, "10.1.0.13"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeReservation(t, rt.data, "stray", "", hourAgo)
		},
		released: 1,
		left:     "10.1.0.10 10.1.0.11 10.1.0.12 10.1.0.13 10.1.0.2 10.1.0.3 10.1.0.300 10.1.0.4 10.1.0.9 last_reserved_ip.0 lock notes.txt",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1,
			prune.ReasonNotRegular: 3, prune.ReasonNotReservation: 5, prune.ReasonNoIdentity: 1},
	}, {
		name: "a network not named is never released in",
		// Another CNI user's network in the same data directory (podman's
		// default): its containers are no sandboxes of the runtime, and
		// look orphaned. Its files are kept, unread.
		setup: func(t *testing.T, rt *reservationTree, _ *runArgs) {
			hourAgo := time.Now().Add(-time.Hour)
			podman := filepath.Join(rt.data, "podman")
			if err := os.Mkdir(podman, 0o755); err != nil {
				t.Fatal(err)
			}
			writeReservation(t, podman, "10.88.0.7", multuscache.NewSandboxID()+"\r\neth0", hourAgo)
			writeReservation(t, podman, "10.88.0.8", multuscache.NewSandboxID()+"\r\neth0", hourAgo)
			writeReservation(t, podman, "lock", "", hourAgo)
			writeReservation(t, podman, "last_reserved_ip.0", "10.88.0.8", hourAgo)
			// A network named like the allowed one's files: no match by
			// prefix.
			net10 := filepath.Join(rt.data, "net10")
			if err := os.Mkdir(net10, 0o755); err != nil {
				t.Fatal(err)
			}
			writeReservation(t, net10, "10.1.1.5", multuscache.NewSandboxID()+"\r\nnet1", hourAgo)
		},
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1,
			prune.ReasonNetworkNotAllowed: 3},
		check: func(t *testing.T, rt *reservationTree) {
			for _, p := range []string{"podman/10.88.0.7", "podman/10.88.0.8", "net10/10.1.1.5"} {
				if _, err := os.Lstat(filepath.Join(rt.data, p)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
		},
	}, {
		name: "no network named releases nothing anywhere",
		setup: func(_ *testing.T, _ *reservationTree, o *runArgs) {
			o.HostLocalNetworks = []string{"other"}
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonNetworkNotAllowed: 4},
	}, {
		name: "the clock guard holds old ones back",
		setup: func(_ *testing.T, _ *reservationTree, o *runArgs) {
			o.Clock = func(time.Duration) prune.ClockState { return prune.ClockState{Uptime: time.Minute} }
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1, prune.ReasonClockUnsettled: 1},
	}, {
		name: "changed after the runtime's list",
		setup: func(_ *testing.T, _ *reservationTree, o *runArgs) {
			o.ViewTime = time.Now().Add(-time.Minute)
		},
		left: "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock",
		kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonNewerThanView: 2},
	}, {
		name: "a missing data directory has nothing to release",
		setup: func(t *testing.T, rt *reservationTree, o *runArgs) {
			o.HostLocalDirs = []string{filepath.Join(t.TempDir(), "none"), rt.data}
		},
		released: 1,
		left:     "10.1.0.2 10.1.0.3 10.1.0.4 last_reserved_ip.0 lock",
		kept:     map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1, prune.ReasonTooYoung: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newReservationTree(t)
			o := rt.opts()
			if tc.setup != nil {
				tc.setup(t, rt, &o)
			}
			var files []prune.File
			o.OnFile = func(f prune.File) {
				if f.Phase == prune.PhaseReservation {
					files = append(files, f)
				}
			}
			if tc.criAlone {
				o.Pods = nil
			}
			sum, err := o.run(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			r := sum.Reservations
			if r.Released != tc.released || !equalCounts(r.Kept, tc.kept) || r.Errors != 0 {
				t.Errorf("released %d, kept %v, errors %d; want %d, %v, 0", r.Released, r.Kept, r.Errors, tc.released, tc.kept)
			}
			if got := rt.left(t); got != tc.left {
				t.Errorf("left %q, want %q", got, tc.left)
			}
			released := 0
			for _, f := range files {
				if f.Remove {
					released++
					if f.Reason != prune.ReasonOrphanedReservation || f.DryRun != o.DryRun || f.Sandbox == "" ||
						!strings.HasPrefix(f.RelPath(), rt.data+"/") {
						t.Errorf("released row %+v", f)
					}
				}
			}
			if released != tc.released {
				t.Errorf("%d released rows, want %d", released, tc.released)
			}
			if tc.check != nil {
				tc.check(t, rt)
			}
		})
	}
}

// runtimeCacheOf writes the runtime's own cache (--runtime-cache-dir) with
// an hour-old file of sandbox's primary network for the pod "web", live in
// rt.pods, and returns the directory.
func runtimeCacheOf(t *testing.T, rt *reservationTree, sandbox string) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(rt.multus), "results")
	web := multuscache.Pod{Namespace: "default", Name: "web", UID: multuscache.UID("web")}
	if _, err := multuscache.RuntimeSandbox(dir, sandbox, web, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func equalCounts(got, want map[prune.Reason]int) bool {
	for r, n := range got {
		if want[r] != n {
			return false
		}
	}
	for r, n := range want {
		if got[r] != n {
			return false
		}
	}
	return true
}

// TestRunReservationsFailClosed: without a synced runtime view, or a prune
// that completed, nothing is released.
func TestRunReservationsFailClosed(t *testing.T) {
	const all = "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock"
	tests := []struct {
		name string
		// mod changes the options and may give the run its context.
		mod     func(t *testing.T, rt *reservationTree, o *runArgs) context.Context
		wantErr error // nil: any error
		check   func(t *testing.T, sum *prune.Summary)
	}{{
		name: "no runtime view",
		mod: func(_ *testing.T, _ *reservationTree, o *runArgs) context.Context {
			o.Sandboxes = nil
			return nil
		},
		wantErr: prune.ErrReservationsNeedRuntime,
	}, {
		name: "no network named",
		mod: func(_ *testing.T, _ *reservationTree, o *runArgs) context.Context {
			o.HostLocalNetworks = nil
			return nil
		},
		wantErr: prune.ErrReservationsNeedNetworks,
	}, {
		name: "view not synced",
		mod: func(_ *testing.T, rt *reservationTree, o *runArgs) context.Context {
			s := newSandboxes(rt.live)
			s.n.Store(0)
			o.Sandboxes = s
			return nil
		},
		wantErr: prune.ErrNotSynced,
	}, {
		name: "view goes stale before the release",
		mod: func(_ *testing.T, rt *reservationTree, o *runArgs) context.Context {
			// Synced for the prune's checks (one at its start; it removes
			// nothing), then stale at the release's.
			s := newSandboxes(rt.live)
			s.n.Store(1)
			o.Sandboxes = s
			return nil
		},
		wantErr: prune.ErrNotSynced,
		check: func(t *testing.T, sum *prune.Summary) {
			if sum.Reservations.Kept[prune.ReasonViewStale] == 0 || sum.Reservations.Released != 0 {
				t.Errorf("counts %+v", sum.Reservations)
			}
		},
	}, {
		name: "prune stopped",
		mod: func(t *testing.T, _ *reservationTree, _ *runArgs) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newReservationTree(t)
			o := rt.opts()
			ctx := tt.mod(t, rt, &o)
			if ctx == nil {
				ctx = t.Context()
			}
			sum, err := o.run(ctx)
			switch {
			case tt.wantErr == nil && err == nil:
				t.Fatal("no error")
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("err %v", err)
			}
			if got := rt.left(t); got != all {
				t.Errorf("left %q", got)
			}
			if tt.check != nil {
				tt.check(t, sum)
			}
		})
	}
}

// holdLock takes host-local's lock of dir as host-local does, from another
// open file description, and returns its release.
func holdLock(t *testing.T, dir string) func() {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, "lock"), unix.O_CREAT|unix.O_RDONLY|unix.O_CLOEXEC, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { unix.Close(fd) }) }
	t.Cleanup(release)
	return release
}

// TestRunReservationWaitsForHostLocal: while host-local holds its lock (an
// ADD or DEL in progress), the release waits; what it then finds decides.
// The race it must not lose: the dead container's DEL releases the address
// and an ADD reserves it again for a new pod, under the same name.
func TestRunReservationWaitsForHostLocal(t *testing.T) {
	t.Run("re-taken meanwhile", func(t *testing.T) {
		rt := newReservationTree(t)
		release := holdLock(t, rt.net)
		done := make(chan *prune.Summary)
		go func() {
			sum, err := rt.opts().run(t.Context())
			if err != nil {
				t.Error(err)
			}
			done <- sum
		}()
		time.Sleep(300 * time.Millisecond)
		select {
		case <-done:
			t.Fatal("the release did not wait for host-local's lock")
		default:
		}
		// As host-local would under its lock: DEL of the dead container,
		// then an ADD for a new one that gets the same address.
		p := filepath.Join(rt.net, "10.1.0.5")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		newer := multuscache.NewSandboxID()
		writeReservation(t, rt.net, "10.1.0.5", newer+"\r\nnet1", time.Now().Add(-time.Hour))
		release()
		sum := <-done
		data, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(data), newer) {
			t.Fatalf("the new pod's reservation: %q, %v", data, err)
		}
		if r := sum.Reservations; r.Released != 0 || r.Kept[prune.ReasonChanged] != 1 {
			t.Errorf("counts %+v", r)
		}
	})
	t.Run("released by host-local meanwhile", func(t *testing.T) {
		rt := newReservationTree(t)
		release := holdLock(t, rt.net)
		done := make(chan *prune.Summary)
		go func() {
			sum, err := rt.opts().run(t.Context())
			if err != nil {
				t.Error(err)
			}
			done <- sum
		}()
		time.Sleep(300 * time.Millisecond)
		if err := os.Remove(filepath.Join(rt.net, "10.1.0.5")); err != nil {
			t.Fatal(err)
		}
		release()
		if r := (<-done).Reservations; r.Released != 0 || r.Vanished != 1 {
			t.Errorf("counts %+v", r)
		}
	})
	t.Run("lock held too long", func(t *testing.T) {
		rt := newReservationTree(t)
		holdLock(t, rt.net)
		o := rt.opts()
		o.HostLocalLockWait = 100 * time.Millisecond
		sum, err := o.run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := sum.Reservations; r.Released != 0 || r.Kept[prune.ReasonLockBusy] != 1 {
			t.Errorf("counts %+v", r)
		}
		if _, err := os.Stat(filepath.Join(rt.net, "10.1.0.5")); err != nil {
			t.Errorf("reservation: %v", err)
		}
	})
	t.Run("released once the lock is free", func(t *testing.T) {
		rt := newReservationTree(t)
		release := holdLock(t, rt.net)
		time.AfterFunc(200*time.Millisecond, release)
		sum, err := rt.opts().run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := sum.Reservations; r.Released != 1 {
			t.Errorf("counts %+v", r)
		}
	})
}

// TestRunReservationLockNotFollowed: a lock that is a symlink is not
// followed, and nothing is released under it.
func TestRunReservationLockNotFollowed(t *testing.T) {
	rt := newReservationTree(t)
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Remove(filepath.Join(rt.net, "lock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(rt.net, "lock")); err != nil {
		t.Fatal(err)
	}
	sum, err := rt.opts().run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r := sum.Reservations; r.Released != 0 || r.Errors != 1 || sum.Errors != 1 {
		t.Errorf("counts %+v, run errors %d", r, sum.Errors)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink's target was made: %v", err)
	}
}

func TestParseReservation(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in   string
		want prune.Reservation
		ok   bool
	}{
		{id + "\r\neth0", prune.Reservation{ContainerID: id, IfName: "eth0"}, true},
		{id, prune.Reservation{ContainerID: id}, true},
		{" " + id + "\r\nnet1\n", prune.Reservation{ContainerID: id, IfName: "net1"}, true},
		{"podman\r\neth0", prune.Reservation{ContainerID: "podman", IfName: "eth0"}, true},
		{"", prune.Reservation{}, false},
		{id + "\neth0", prune.Reservation{}, false},
		{id + "\r\n", prune.Reservation{ContainerID: id}, true}, // trimmed to the ID alone, as host-local compares it
		{id + "\r\neth0\r\nmore", prune.Reservation{}, false},
		{"a b\r\neth0", prune.Reservation{}, false},
		{"\x00\r\neth0", prune.Reservation{}, false},
	} {
		got, err := prune.ParseReservation([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseReservation(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseReservation: whatever it accepts is one visible word of ID and at
// most one of interface, which host-local's own comparison would match.
func FuzzParseReservation(f *testing.F) {
	f.Add([]byte(strings.Repeat("ab", 32) + "\r\neth0"))
	f.Add([]byte("id"))
	f.Add([]byte("\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := prune.ParseReservation(data)
		if err != nil {
			return
		}
		key := r.ContainerID
		if r.IfName != "" {
			key += "\r\n" + r.IfName
		}
		if key != strings.TrimSpace(string(data)) {
			t.Fatalf("%q parsed as %+v, which host-local would not match", data, r)
		}
		for _, part := range []string{r.ContainerID, r.IfName} {
			if !utf8.ValidString(part) || strings.ContainsFunc(part, func(c rune) bool { return c <= ' ' || c > '~' }) {
				t.Fatalf("%q parsed as %+v: not one visible word", data, r)
			}
		}
	})
}
