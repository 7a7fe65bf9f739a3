package daemon

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sweep-k8s/sweep/internal/kubehint"
	"github.com/sweep-k8s/sweep/liveness"
)

// The daemon's dependencies as its health names them.
const (
	sourceAPIServer = "api-server"
	sourceRuntime   = "container-runtime"
)

// Defaults of the health's timing. A view is not fresh for a moment at
// every renewal of its watch (one list, well under outageGrace); an outage
// that lasts is said again every outageReminder, so that a log read at any
// time shows it, without a line per retry.
const (
	outageGrace    = 10 * time.Second
	outageReminder = 5 * time.Minute
)

// health says what the daemon cannot reach: the first failure of each
// dependency at WARN with its cause and what to check, a reminder while it
// lasts, and its end at INFO; /readyz gives the same reasons.
type health struct {
	log           *slog.Logger
	grace, remind time.Duration

	mu      sync.Mutex
	outages map[string]*outage // by source
}

// outage is a dependency failing since since.
type outage struct {
	since time.Time
	told  time.Time // last WARN; zero until the first
	err   error
}

func newHealth(log *slog.Logger) *health {
	return &health{log: log, grace: outageGrace, remind: outageReminder, outages: map[string]*outage{}}
}

// set records that source fails with err at now, and says so once it has
// failed for the grace period, then every reminder period.
func (h *health) set(now time.Time, source string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.outages[source]
	if o == nil {
		o = &outage{since: now}
		h.outages[source] = o
	}
	o.err = err
	if now.Sub(o.since) < h.grace || (!o.told.IsZero() && now.Sub(o.told) < h.remind) {
		return
	}
	msg := "cannot reach a dependency: nothing is pruned while it lasts"
	if !o.told.IsZero() {
		msg = "still cannot reach a dependency: nothing is pruned while it lasts"
	}
	o.told = now
	args := []any{"source", source, "since", o.since.UTC().Format(time.RFC3339), "error", err}
	if hint := kubehint.Hint(err); hint != "" && !strings.Contains(err.Error(), hint) {
		args = append(args, "hint", hint)
	}
	h.log.Warn(msg, args...)
}

// clear records that source works at now, and says so if its failure was
// said.
func (h *health) clear(now time.Time, source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.outages[source]
	if o == nil {
		return
	}
	delete(h.outages, source)
	if !o.told.IsZero() {
		h.log.Info("dependency reachable again", "source", source, "down_seconds", now.Sub(o.since).Seconds())
	}
}

// observe records the problems of the views that follow the API server:
// one dependency, said once whichever views it fails (the pods' first).
func (h *health) observe(now time.Time, problems []liveness.Problem) {
	if len(problems) == 0 {
		h.clear(now, sourceAPIServer)
		return
	}
	h.set(now, sourceAPIServer, problems[0].Err)
}

// reason says what fails now, for /readyz: "pods: <error>; ...", or "".
func (h *health) reason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rs []string
	for s, o := range h.outages {
		rs = append(rs, fmt.Sprintf("%s: %v", s, o.err))
	}
	slices.Sort(rs)
	return strings.Join(rs, "; ")
}

// proofReason says why the views are not proven: the last proof's error,
// or what fails to answer.
func (d *Daemon) proofReason() string {
	d.proofMu.Lock()
	msg := d.proofMsg
	d.proofMu.Unlock()
	if msg != "" {
		return msg
	}
	if r := d.health.reason(); r != "" {
		return r
	}
	return "not proven yet"
}
