package cri_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{cri.DefaultEndpoint, "/run/containerd/containerd.sock", true},
		{"unix:///var/run/crio/crio.sock", "/var/run/crio/crio.sock", true},
		{"/run/containerd/containerd.sock", "", false}, // no scheme
		{"unix://run/containerd.sock", "", false},      // a host, not a path
		{"unix:relative.sock", "", false},
		{"tcp://127.0.0.1:1234", "", false},
		{"unix:///x.sock?a=b", "", false},
	} {
		got, err := cri.ParseEndpoint(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: got %q, %v", tc.in, got, err)
		}
	}
}

func mustID(t *testing.T, s string) prune.SandboxID {
	t.Helper()
	id, ok := cachefile.ParseSandboxID(s)
	if !ok {
		t.Fatalf("bad id %q", s)
	}
	return id
}

func TestSandboxes(t *testing.T) {
	srv := fakecri.Start(t)
	ready, notReady, unknown := multuscache.NewSandboxID(), multuscache.NewSandboxID(), multuscache.NewSandboxID()
	srv.SetSandboxes(ready)
	srv.Add(notReady, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	c, err := cri.New(srv.Endpoint, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	name, _, err := c.Version(t.Context())
	if err != nil || name != "fakecri" {
		t.Fatalf("version: %q, %v", name, err)
	}
	s, err := c.Sandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Synced() || s.Len() != 2 || s.Ready() != 1 {
		t.Fatalf("synced %v, len %d, ready %d", s.Synced(), s.Len(), s.Ready())
	}
	// A NOTREADY sandbox is still the runtime's.
	if !s.Has(mustID(t, ready)) || !s.Has(mustID(t, notReady)) || s.Has(mustID(t, unknown)) {
		t.Fatal("wrong membership")
	}
}

func TestSandboxesFailClosed(t *testing.T) {
	t.Run("hanging runtime: error within the timeout", func(t *testing.T) {
		srv := fakecri.Start(t)
		srv.SetHang(true)
		c, _ := cri.New(srv.Endpoint, 300*time.Millisecond)
		start := time.Now()
		if _, err := c.Sandboxes(t.Context()); err == nil {
			t.Fatal("no error")
		} else {
			t.Logf("%v after %s", err, time.Since(start))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %s", d)
		}
		srv.SetHang(false)
		if _, err := c.Sandboxes(t.Context()); err != nil {
			t.Fatalf("after the hang: %v", err)
		}
	})
	t.Run("stopped runtime, then back", func(t *testing.T) {
		srv := fakecri.Start(t)
		c, _ := cri.New(srv.Endpoint, time.Second)
		srv.Stop()
		if _, err := c.Sandboxes(t.Context()); err == nil {
			t.Fatal("no error from a stopped runtime")
		}
		srv.Resume(t)
		if _, err := c.Sandboxes(t.Context()); err != nil {
			t.Fatalf("after resume: %v", err)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		srv := fakecri.Start(t)
		srv.SetHang(true)
		c, _ := cri.New(srv.Endpoint, time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if _, err := c.Sandboxes(ctx); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("sandbox id in a form no cache file uses", func(t *testing.T) {
		srv := fakecri.Start(t)
		srv.SetSandboxes(multuscache.NewSandboxID(), strings.ToUpper(multuscache.NewSandboxID()))
		c, _ := cri.New(srv.Endpoint, time.Second)
		if _, err := c.Sandboxes(t.Context()); !errors.Is(err, cri.ErrBadSandboxID) {
			t.Fatalf("err %v, want ErrBadSandboxID", err)
		}
	})
}

// TestPruneWithRuntime runs the prune with the fake runtime's list as its
// only liveness view.
func TestPruneWithRuntime(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	live, dead := multuscache.NewSandboxID(), multuscache.NewSandboxID()
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: "uid-p"}
	for _, id := range []string{live, dead} {
		if _, err := multuscache.Sandbox(dir, id, pod, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
	}
	srv := fakecri.Start(t)
	srv.Add(live, runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	c, _ := cri.New(srv.Endpoint, time.Second)
	s, err := c.Sandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := prune.Run(t.Context(), prune.Views{Sandboxes: s}, prune.Options{Config: prune.Config{Dir: dir, MinAge: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.RemovedBy[prune.ReasonSandboxGone] != 2 || sum.Removed[prune.PhaseScratch] != 1 || sum.Kept[prune.ReasonSandboxLive] != 2 {
		t.Fatalf("summary %+v", sum)
	}
}
