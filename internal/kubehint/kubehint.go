// Package kubehint says, as kubectl would, what to check when a request to
// the API server or the container runtime fails: "did you specify the right
// host or port?", and whether retrying can help.
package kubehint

import (
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Hint says, as kubectl would, what to check when a request fails: to the
// API server (err from client-go) or to the container runtime (err from
// package cri). "" when err says enough by itself, or is one that
// retrying may cure (a timeout, a 5xx, throttling).
func Hint(err error) string {
	if err == nil {
		return ""
	}
	var (
		dns     *net.DNSError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	switch {
	case apierrors.IsUnauthorized(err):
		return "the API server does not accept these credentials: check the token or certificate of --kubeconfig's user, or the pod's service account"
	case apierrors.IsForbidden(err):
		return "the credentials are not allowed to read what sweepd needs: it needs get, list and watch on pods and nodes, and get on the node's Lease in kube-node-lease (the chart's RBAC, docs/install.md)"
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host):
		return "the API server's certificate is not trusted for this address: check --kubeconfig's server and certificate-authority"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "the API server's host name does not resolve - did you specify the right host?"
	case errors.Is(err, os.ErrNotExist) && strings.Contains(err.Error(), "unix"):
		return "the container runtime's socket does not exist: is the runtime running, is --cri-endpoint its socket, and is the socket's directory mounted into the pod?"
	case utilnet.IsConnectionRefused(err):
		if strings.Contains(err.Error(), "unix") {
			return "the container runtime's socket refuses connections: is the runtime running, and is --cri-endpoint its socket?"
		}
		if h := serverHost(err); h != "" {
			return "the connection to the server " + h + " was refused - did you specify the right host or port?"
		}
		return "the connection to the API server was refused - did you specify the right host or port?"
	}
	return ""
}

// Permanent reports whether err is one that retrying within a one-shot's
// time limit will not cure: a refused connection, a host that does not
// resolve, an untrusted certificate, credentials refused or not allowed, a
// socket that does not exist. `sweepd prune` gives up at once on those,
// with the hint, instead of retrying until its timeout.
func Permanent(err error) bool {
	// Every failure Hint explains is one of those; a missing file that is
	// no socket is too.
	return Hint(err) != "" || errors.Is(err, os.ErrNotExist)
}

// serverHost is the host:port of the request that err is about, if it says.
func serverHost(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return ""
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		return ""
	}
	return u.Host
}

// WithHint returns err with Hint(err) added to its message, or err as it is
// when there is none.
func WithHint(err error) error {
	if h := Hint(err); h != "" {
		return &hintError{err: err, hint: h}
	}
	return err
}

// hintError is an error with what to check after it.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + ": " + e.hint }
func (e *hintError) Unwrap() error { return e.err }
