package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework"
)

// syncBuffer is a log destination that tests read while the daemon writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHealthSaysOutages: a failure is said at WARN once it has lasted the
// grace period, then once a reminder period, and its end at INFO; a blip
// shorter than the grace (a watch renewal) is never said.
func TestHealthSaysOutages(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps func(h *health) // may call t.Errorf
		want  []string        // the log lines' messages, in order
	}{
		{"a blip under the grace is not said", func(h *health) {
			h.set(t0, sourceAPIServer, refused)
			h.set(t0.Add(5*time.Second), sourceAPIServer, refused)
			h.clear(t0.Add(6*time.Second), sourceAPIServer)
		}, nil},
		{"an outage: once, a reminder, its end", func(h *health) {
			for s := 0; s <= 700; s++ {
				h.set(t0.Add(time.Duration(s)*time.Second), sourceAPIServer, refused)
			}
			h.clear(t0.Add(701*time.Second), sourceAPIServer)
		}, []string{"cannot reach a dependency", "still cannot reach a dependency", "still cannot reach a dependency", "dependency reachable again"}},
		{"each dependency on its own", func(h *health) {
			h.set(t0, sourceAPIServer, refused)
			h.set(t0, sourceRuntime, refused)
			h.set(t0.Add(10*time.Second), sourceAPIServer, refused)
			h.set(t0.Add(10*time.Second), sourceRuntime, refused)
			h.clear(t0.Add(11*time.Second), sourceRuntime)
			if r := h.reason(); r != "api-server: connection refused" {
				t.Errorf("reason %q with the API server still failing", r)
			}
			h.clear(t0.Add(12*time.Second), sourceAPIServer)
		}, []string{"cannot reach a dependency", "cannot reach a dependency", "dependency reachable again", "dependency reachable again"}},
		{"the views' problems are the API server's", func(h *health) {
			h.observe(t0, []liveness.Problem{{Source: liveness.SourcePods, Err: refused}, {Source: liveness.SourceNode, Err: refused}})
			h.observe(t0.Add(10*time.Second), []liveness.Problem{{Source: liveness.SourceNode, Err: refused}})
			h.observe(t0.Add(11*time.Second), nil)
		}, []string{"cannot reach a dependency", "dependency reachable again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := newHealth(slog.New(slog.NewTextHandler(&buf, nil)))
			tc.steps(h)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if _, msg, ok := strings.Cut(l, `msg="`); ok {
					msg, _, _ = strings.Cut(msg, `"`)
					got = append(got, msg)
				}
			}
			for i := range got {
				if i < len(tc.want) && strings.HasPrefix(got[i], tc.want[i]) {
					got[i] = tc.want[i]
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("logged %q, want %q\n%s", got, tc.want, buf.String())
			}
			if h.reason() != "" {
				t.Errorf("reason %q after every outage ended", h.reason())
			}
		})
	}
}

// TestDaemonSaysWhyItCannotWork: with the API server unreachable, the daemon
// says why at WARN (with kubectl's hint) within the grace period, and
// /readyz names the dependency and the cause; with the runtime's socket
// missing, the same for the runtime.
func TestDaemonSaysWhyItCannotWork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close() // nothing listens there any more: connections are refused
	for _, tc := range []struct {
		name       string
		cfg        Config
		wantLog    []string
		wantReadyz []string
	}{
		{"api server refuses", Config{Liveness: liveness.Config{
			NodeName: "n1",
			RESTConfig: func() (*rest.Config, error) {
				return &rest.Config{Host: "https://" + refused, BearerToken: "x", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, nil
			},
		}}, []string{`level=WARN msg="cannot reach a dependency`, "source=api-server", "connection refused", "did you specify the right host or port?"},
			[]string{"not synced: api-server:", "connection refused", "did you specify the right host or port?"}},
		{"runtime socket missing", Config{Liveness: liveness.Config{
			Mode: liveness.ModeCRI, CRIEndpoint: "unix://" + t.TempDir() + "/containerd.sock",
		}}, []string{`level=WARN msg="cannot reach a dependency`, "source=container-runtime", `hint="the container runtime's socket does not exist`},
			[]string{"not synced: container-runtime:", "no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			cfg := tc.cfg
			cfg.Schedule, cfg.MetricsAddr = "@hourly", "127.0.0.1:0"
			cfg.Prune = prune.Config{Dir: t.TempDir(), MinAge: time.Hour}
			cfg.Liveness.CRITimeout = time.Second
			d, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			d.health.grace = time.Second
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("daemon: %v", err)
				}
			})
			framework.Eventually(t, 30*time.Second, "the WARN line", func() bool {
				out := logs.String()
				for _, w := range tc.wantLog {
					if !strings.Contains(out, w) {
						return false
					}
				}
				return true
			})
			addr := metricsAddr(t, &logs)
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("readyz %d %s", resp.StatusCode, body)
			}
			for _, w := range tc.wantReadyz {
				if !strings.Contains(string(body), w) {
					t.Errorf("readyz says %q, want %q in it", body, w)
				}
			}
		})
	}
}

// metricsAddr reads the address the daemon's HTTP server listens on from
// its log.
func metricsAddr(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="serving metrics"`) {
			if _, a, ok := strings.Cut(l, "addr="); ok {
				return strings.Fields(a)[0]
			}
		}
	}
	t.Fatalf("no serving metrics line in\n%s", logs.String())
	return ""
}
