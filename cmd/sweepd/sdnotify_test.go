package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestHealthCheckAddress(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || !healthy.Load() {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, c := range []struct {
		addr string
		want bool
	}{
		{":" + port, true},        // all interfaces: asked on loopback
		{"0.0.0.0:" + port, true}, // likewise
		{"127.0.0.1:" + port, true},
		{"", true},               // no HTTP server: nothing to ask
		{"not-an-address", true}, // likewise (the daemon rejects it itself)
		{"127.0.0.1:1", false},   // nothing listens
	} {
		if got := healthCheck(c.addr, time.Second)(t.Context()); got != c.want {
			t.Errorf("healthCheck(%q) = %v, want %v", c.addr, got, c.want)
		}
	}
	healthy.Store(false)
	if healthCheck(":"+port, time.Second)(t.Context()) {
		t.Error("healthy while /healthz answers 503")
	}
}

// TestSystemdNotifier checks the watchdog against a fake notify socket: pings
// while /healthz answers, none while it does not, READY=1 when asked.
func TestSystemdNotifier(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", strconv.Itoa(int((200 * time.Millisecond).Microseconds()))) // pings every 100 ms
	ready := systemdNotifier(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), srv.Listener.Addr().String())

	expect := func(want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if m != want {
				t.Fatalf("got %q, want %q", m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", want)
		}
	}
	expect("WATCHDOG=1")
	ready()
	// A ping may be in flight before READY=1.
	for m := range msgs {
		if m == "READY=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q", m)
		}
	}

	healthy.Store(false)
	time.Sleep(150 * time.Millisecond) // let a check in flight finish
	for len(msgs) > 0 {
		<-msgs
	}
	select {
	case m := <-msgs:
		t.Fatalf("got %q while /healthz fails", m)
	case <-time.After(500 * time.Millisecond):
	}
	healthy.Store(true)
	expect("WATCHDOG=1")
}

func TestSystemdNotifierOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "100000")
	systemdNotifier(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), ":0")() // no-op, no panic
}
