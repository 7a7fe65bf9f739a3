package liveness

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// serverDate receives the API server's Date header of one response: its
// own wall clock as it answered. The Lease witness compares it with the
// time the same API server stamped on the kubelet's last renewal
// (managedFields), so that the renewal's age is measured by one clock,
// none of this node's.
type serverDate struct {
	mu sync.Mutex
	at time.Time
}

func (d *serverDate) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
}

// time returns the Date received, zero when none was.
func (d *serverDate) time() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

type serverDateKey struct{}

// withServerDate returns ctx asking the transport of recordServerDate to
// put the Date of the response to a request made with it into d.
func withServerDate(ctx context.Context, d *serverDate) context.Context {
	return context.WithValue(ctx, serverDateKey{}, d)
}

// recordServerDate wraps a client's transport so that a request whose
// context asks (withServerDate) gets its response's Date header: client-go's
// dynamic client returns the object only. Other requests pass untouched.
func recordServerDate(rt http.RoundTripper) http.RoundTripper {
	return dateRoundTripper{next: rt}
}

type dateRoundTripper struct{ next http.RoundTripper }

func (r dateRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if d, ok := req.Context().Value(serverDateKey{}).(*serverDate); ok && err == nil {
		if t, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			d.set(t)
		}
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath
// (utilnet.RoundTripperWrapper), to close its idle connections.
func (r dateRoundTripper) WrappedRoundTripper() http.RoundTripper { return r.next }
