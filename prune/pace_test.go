package prune_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// staleSandboxes writes n sandboxes of deleted pods, two results files
// each, and returns the cache directory.
func staleSandboxes(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	for i := range n {
		name := fmt.Sprintf("gone-%d", i)
		pod := multuscache.Pod{Namespace: "default", Name: name, UID: multuscache.UID(name)}
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// permits is a Limiter that lets n calls through, then refuses as a rate
// limiter does when the next permission would come after the deadline.
type permits struct {
	left  atomic.Int64
	calls atomic.Int64
}

func (p *permits) Wait(context.Context) error {
	p.calls.Add(1)
	if p.left.Add(-1) < 0 {
		return errors.New("would exceed the deadline")
	}
	return nil
}

// countingReleaser counts Release calls, the most in progress at once
// overall and for any one sandbox; each call waits for gate, if set.
type countingReleaser struct {
	gate    func(inFlight int)
	mu      sync.Mutex
	calls   int
	now     int
	maxNow  int
	sandbox map[string]int
	maxSame int
}

func (r *countingReleaser) Release(_ context.Context, name string, _ []byte) error {
	id, _ := cachefile.SandboxIDFromResultsName(name)
	r.mu.Lock()
	if r.sandbox == nil {
		r.sandbox = map[string]int{}
	}
	r.calls++
	r.now++
	r.maxNow = max(r.maxNow, r.now)
	r.sandbox[id.String()]++
	r.maxSame = max(r.maxSame, r.sandbox[id.String()])
	n := r.now
	r.mu.Unlock()
	if r.gate != nil {
		r.gate(n)
	}
	r.mu.Lock()
	r.now--
	r.sandbox[id.String()]--
	r.mu.Unlock()
	return nil
}

func resultsLeft(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestReleasePacing: the rate is asked before every DEL, and the files it
// (or the deadline, or the cap) refuses are kept as deferred, counted, and
// left for the next run.
func TestReleasePacing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		permits     int64
		max         int
		until       time.Time
		limiter     prune.Limiter // overrides permits
		wantDels    int
		wantWaitsLE int64 // Wait calls at most: none for files the cap or deadline refused
	}{
		{name: "every DEL waits for the rate", permits: 100, wantDels: 10, wantWaitsLE: 10},
		{name: "refused by the rate: deferred", permits: 3, wantDels: 3, wantWaitsLE: 10},
		{name: "cap before the rate", permits: 100, max: 4, wantDels: 4, wantWaitsLE: 4},
		{name: "deadline passed: nothing waits", permits: 100, until: time.Now().Add(-time.Second), wantDels: 0, wantWaitsLE: 0},
		{
			// x/time/rate refuses at once a wait that would end after the
			// deadline: one burst token, then an hour per DEL.
			name: "real limiter, deadline before the next token", limiter: rate.NewLimiter(rate.Every(time.Hour), 1),
			until: time.Now().Add(time.Hour / 2), wantDels: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := staleSandboxes(t, 5)
			p := &permits{}
			p.left.Store(tc.permits)
			var lim prune.Limiter = p
			if tc.limiter != nil {
				lim = tc.limiter
			}
			rel := &countingReleaser{}
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, ReleaseConcurrency: 2, MaxReleases: tc.max}, Deps: prune.Deps{Release: rel, ReleaseRate: lim}, ReleaseUntil: tc.until})
			if err != nil {
				t.Fatal(err)
			}
			if rel.calls != tc.wantDels || sum.CNIDel.Attempted != tc.wantDels {
				t.Errorf("%d Release calls, %d attempted; want %d", rel.calls, sum.CNIDel.Attempted, tc.wantDels)
			}
			if tc.limiter == nil && p.calls.Load() > tc.wantWaitsLE {
				t.Errorf("%d waits for the rate, want at most %d", p.calls.Load(), tc.wantWaitsLE)
			}
			if tc.limiter == nil && p.calls.Load() < int64(tc.wantDels) {
				t.Errorf("%d waits for the rate for %d DELs", p.calls.Load(), tc.wantDels)
			}
			if got := sum.Kept[prune.ReasonCNIDelDeferred]; got < 10-tc.wantDels {
				// Scratch files of deferred sandboxes are kept as
				// referenced; the results files themselves as deferred.
				t.Errorf("kept %d as %s, want %d (all: %v)", got, prune.ReasonCNIDelDeferred, 10-tc.wantDels, sum.Kept)
			}
			if got := resultsLeft(t, dir); got != 10-tc.wantDels {
				t.Errorf("%d results files left, want %d", got, 10-tc.wantDels)
			}
		})
	}
}

// TestReleaseConcurrency: at most ReleaseConcurrency DELs at once, and that
// many do run at once; never two for one sandbox.
func TestReleaseConcurrency(t *testing.T) {
	for _, tc := range []struct {
		conc int
		// noContainerID strips containerId from the results files: then
		// only their names say which sandbox they are of.
		noContainerID bool
	}{{conc: 1}, {conc: 3}, {conc: 3, noContainerID: true}} {
		conc := tc.conc
		t.Run(fmt.Sprint(conc, " no containerId ", tc.noContainerID), func(t *testing.T) {
			dir := staleSandboxes(t, 8)
			if tc.noContainerID {
				stripContainerID(t, filepath.Join(dir, "results"))
			}
			reached := make(chan struct{})
			var once sync.Once
			rel := &countingReleaser{gate: func(n int) {
				if n >= conc {
					once.Do(func() { close(reached) })
				}
				// Each DEL lasts until conc run at once, so that a bound
				// lower than conc shows; the deadline only ends a broken run.
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
				}
			}}
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, ReleaseConcurrency: conc, Workers: 1}, Deps: prune.Deps{Release: rel}})
			if err != nil {
				t.Fatal(err)
			}
			if sum.CNIDel.Succeeded != 16 {
				t.Errorf("%d DELs succeeded, want 16", sum.CNIDel.Succeeded)
			}
			if rel.maxNow != conc {
				t.Errorf("at most %d DELs at once, want %d", rel.maxNow, conc)
			}
			if rel.maxSame != 1 {
				t.Errorf("%d DELs at once for one sandbox", rel.maxSame)
			}
		})
	}
}

// stripContainerID removes the containerId of every results file in dir.
func stripContainerID(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		data, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(data, &f)
		}
		if err != nil {
			t.Fatal(err)
		}
		delete(f, "containerId")
		if data, err = json.Marshal(f); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
}

// blockingLimiter blocks until ctx ends, and says when it was first asked.
type blockingLimiter struct {
	asked chan struct{}
	once  sync.Once
}

func (b *blockingLimiter) Wait(ctx context.Context) error {
	b.once.Do(func() { close(b.asked) })
	<-ctx.Done()
	return ctx.Err()
}

// TestReleaseCancelled: a run cancelled while DELs wait for the rate stops,
// runs no DEL and removes no results file.
func TestReleaseCancelled(t *testing.T) {
	dir := staleSandboxes(t, 4)
	lim := &blockingLimiter{asked: make(chan struct{})}
	rel := &countingReleaser{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		<-lim.asked
		cancel()
	}()
	sum, err := prune.Run(ctx, prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, ReleaseConcurrency: 2}, Deps: prune.Deps{Release: rel, ReleaseRate: lim}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run ended with %v, want context.Canceled", err)
	}
	if rel.calls != 0 || sum.CNIDel.Attempted != 0 {
		t.Errorf("%d DELs ran after the cancel", rel.calls)
	}
	if got := resultsLeft(t, dir); got != 8 {
		t.Errorf("%d results files left, want 8", got)
	}
}

// switchGate is a Gate closed until open is closed; it counts its waiters.
type switchGate struct {
	open    chan struct{}
	waiting atomic.Int64
}

func (g *switchGate) Wait(ctx context.Context) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReleaseGate: no DEL starts while the gate is closed, each starts once
// it opens, and the summary says how long they were held; a gate that
// stays closed past ReleaseUntil defers the rest, as the rate does.
func TestReleaseGate(t *testing.T) {
	t.Run("held, then released", func(t *testing.T) {
		dir := staleSandboxes(t, 5)
		g := &switchGate{open: make(chan struct{})}
		rel := &countingReleaser{}
		type result struct {
			sum *prune.Summary
			err error
		}
		done := make(chan result, 1)
		go func() {
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, ReleaseConcurrency: 2}, Deps: prune.Deps{Release: rel, ReleaseGate: g}})
			done <- result{sum, err}
		}()
		// A DEL waits at the gate (the other worker may wait for the same
		// sandbox's lock): nothing runs past it.
		deadline := time.Now().Add(30 * time.Second)
		for g.waiting.Load() < 1 {
			if time.Now().After(deadline) {
				t.Fatal("no DEL waits at the gate after 30s")
			}
			time.Sleep(time.Millisecond)
		}
		rel.mu.Lock()
		calls := rel.calls
		rel.mu.Unlock()
		if calls != 0 {
			t.Fatalf("%d DELs ran through a closed gate", calls)
		}
		time.Sleep(10 * time.Millisecond) // some time held, for the summary
		close(g.open)
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.sum.CNIDel.Succeeded != 10 || resultsLeft(t, dir) != 0 {
			t.Errorf("%d DELs succeeded, %d results files left; want 10 and 0", r.sum.CNIDel.Succeeded, resultsLeft(t, dir))
		}
		if r.sum.CNIDel.HeldSeconds < 0.01 {
			t.Errorf("held %gs, want at least the 10ms the gate was closed", r.sum.CNIDel.HeldSeconds)
		}
	})
	t.Run("closed past the run's end: deferred", func(t *testing.T) {
		dir := staleSandboxes(t, 5)
		g := &switchGate{open: make(chan struct{})}
		rel := &countingReleaser{}
		sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, ReleaseConcurrency: 2}, Deps: prune.Deps{Release: rel, ReleaseGate: g}, ReleaseUntil: time.Now().Add(100 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		if rel.calls != 0 || sum.Kept[prune.ReasonCNIDelDeferred] != 10 || resultsLeft(t, dir) != 10 {
			t.Errorf("%d DELs, kept %v, %d results files left; want none, 10 deferred, 10 left", rel.calls, sum.Kept, resultsLeft(t, dir))
		}
	})
	t.Run("dry run: never asked", func(t *testing.T) {
		dir := staleSandboxes(t, 2)
		g := &switchGate{open: make(chan struct{})}
		sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, DryRun: true}, Deps: prune.Deps{Release: &countingReleaser{}, ReleaseGate: g}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.CNIDel.Attempted != 4 || resultsLeft(t, dir) != 4 {
			t.Errorf("dry run: %d DELs would run, %d files left; want 4 and 4", sum.CNIDel.Attempted, resultsLeft(t, dir))
		}
	})
}

// changingGate changes every results file of dir the first time it is
// waited for, as a new ADD of the same name would while a DEL waits for
// its turn.
type changingGate struct {
	once   sync.Once
	dir    string
	change func(t *testing.T, path string)
	t      *testing.T
}

func (g *changingGate) Wait(context.Context) error {
	g.once.Do(func() {
		ents, err := os.ReadDir(g.dir)
		if err != nil {
			g.t.Error(err)
			return
		}
		for _, e := range ents {
			g.change(g.t, filepath.Join(g.dir, e.Name()))
		}
	})
	return nil
}

// TestReleaseRechecksAfterWait: the wait for the pace and the gate comes
// before the re-check of the file, so a file changed meanwhile (newer, or
// another file under the name) is kept as changed and has no DEL.
func TestReleaseRechecksAfterWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{name: "written again", change: func(t *testing.T, path string) {
			now := time.Now()
			if err := os.Chtimes(path, now, now); err != nil {
				t.Error(err)
			}
		}},
		{name: "replaced, same times", change: func(t *testing.T, path string) {
			st, err := os.Stat(path)
			if err == nil {
				var data []byte
				if data, err = os.ReadFile(path); err == nil {
					tmp := path + ".new"
					if err = os.WriteFile(tmp, data, 0o600); err == nil {
						if err = os.Chtimes(tmp, st.ModTime(), st.ModTime()); err == nil {
							err = os.Rename(tmp, path)
						}
					}
				}
			}
			if err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One results file: the one that waits at the gate.
			dir := filepath.Join(t.TempDir(), "multus")
			pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
			if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments()[:1], time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			rel := &countingReleaser{}
			g := &changingGate{dir: filepath.Join(dir, "results"), change: tc.change, t: t}
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1}, Deps: prune.Deps{Release: rel, ReleaseGate: g}})
			if err != nil {
				t.Fatal(err)
			}
			if rel.calls != 0 || sum.Kept[prune.ReasonChanged] != 1 || resultsLeft(t, dir) != 1 {
				t.Errorf("%d DELs, kept %v, %d results files left; want none, the file kept as changed", rel.calls, sum.Kept, resultsLeft(t, dir))
			}
		})
	}
}

// TestReleaseCapGivenBack: a DEL taken from the run's cap for a file that
// the re-check then keeps is given back, so the cap still counts the DELs
// made.
func TestReleaseCapGivenBack(t *testing.T) {
	dir := staleSandboxes(t, 2)
	rel := &countingReleaser{}
	// The first file to wait is replaced under its name; the others are
	// read after that, as the new files they are.
	g := &changingGate{dir: filepath.Join(dir, "results"), t: t, change: func(t *testing.T, path string) {
		data, err := os.ReadFile(path)
		if err == nil {
			st, _ := os.Stat(path)
			if err = os.WriteFile(path+".new", data, 0o600); err == nil {
				if err = os.Chtimes(path+".new", st.ModTime(), st.ModTime()); err == nil {
					err = os.Rename(path+".new", path)
				}
			}
		}
		if err != nil {
			t.Error(err)
		}
	}}
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, MaxReleases: 2, Workers: 1}, Deps: prune.Deps{Release: rel, ReleaseGate: g}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kept[prune.ReasonChanged] != 1 || rel.calls != 2 || sum.Kept[prune.ReasonCNIDelDeferred] != 1 {
		t.Errorf("kept %v, %d DELs; want one changed, 2 DELs (the cap), one deferred", sum.Kept, rel.calls)
	}
}
