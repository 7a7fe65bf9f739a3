package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serve starts the HTTP server: /metrics, /healthz (the process serves) and
// /readyz (the first sync of the node's pods is done or, with cri liveness
// alone, the runtime answered once, and the views are proven to be this
// node's). It stops with ctx.
func (d *Daemon) serve(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) (*http.Server, error) {
	l, err := net.Listen("tcp", d.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", d.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Registry(), promhttp.HandlerOpts{Registry: d.metrics.Registry()}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !d.synced.Load():
			why := d.health.reason()
			if why == "" {
				why = "waiting for the first list of the node's pods"
				if d.views.Pods() == nil {
					why = "waiting for the container runtime's first answer"
				}
			}
			http.Error(w, "not synced: "+why, http.StatusServiceUnavailable)
			return
		case !d.proven.Load():
			http.Error(w, "the views are not proven to be this node's: "+d.proofReason(), http.StatusServiceUnavailable)
			return
		}
		if why := d.pauseReason(); why != "" {
			// Ready: a paused daemon still serves its metrics, and says so.
			fmt.Fprintln(w, "ok (paused: "+why+")")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case errc <- fmt.Errorf("http server: %w", err):
			default:
			}
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	})
	d.log.Info("serving metrics", "addr", l.Addr().String())
	return srv, nil
}
