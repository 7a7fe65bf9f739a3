package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sweep-k8s/sweep/internal/sdnotify"
)

// systemdNotifier returns the daemon's hooks into systemd: READY=1 after the
// first sync (Type=notify) and, when the unit sets WatchdogSec=, WATCHDOG=1
// pings at half that interval from a goroutine that stops with ctx. Outside
// systemd both are no-ops.
//
// A ping is sent only while the daemon is healthy: its own /healthz answers
// over loopback. That proves more than a timer goroutine alone (the HTTP
// server and the scheduler's process are alive and not wedged), and a daemon
// that stops answering gets restarted by systemd. With --metrics-addr empty
// there is nothing to ask, and the ping only proves the process runs.
func systemdNotifier(ctx context.Context, log *slog.Logger, metricsAddr string) (ready func()) {
	n := sdnotify.New(os.Getenv)
	if !n.Enabled() {
		return func() {}
	}
	interval, ok, err := sdnotify.WatchdogInterval(os.Getenv, os.Getpid())
	if err != nil {
		log.Warn("systemd watchdog disabled", "error", err)
	}
	if ok {
		healthy := healthCheck(metricsAddr, interval/2)
		go func() {
			tick := time.NewTicker(interval / 2)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if !healthy(ctx) {
					log.Warn("systemd watchdog: /healthz does not answer; not pinging")
					continue
				}
				if err := n.Watchdog(); err != nil {
					log.Warn("systemd watchdog", "error", err)
				}
			}
		}()
		log.Info("systemd watchdog enabled", "interval", interval)
	}
	return func() {
		if err := n.Ready(); err != nil {
			log.Warn("systemd notify", "error", err)
		}
	}
}

// healthCheck returns a check of the daemon's /healthz on loopback, or one
// that always passes when the HTTP server is disabled.
func healthCheck(metricsAddr string, timeout time.Duration) func(context.Context) bool {
	host, port, err := net.SplitHostPort(metricsAddr)
	if metricsAddr == "" || err != nil {
		return func(context.Context) bool { return true }
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	client := &http.Client{Timeout: timeout}
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
