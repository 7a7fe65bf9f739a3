package kubehint

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestHint(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/pods",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		name      string
		err       error
		hint      string // a part of it; "" for none
		permanent bool
	}{
		{"refused", refused, "the connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?", true},
		{"refused, wrapped", fmt.Errorf("list pods: %w", refused), "10.0.0.1:6443 was refused", true},
		{"no such host", &url.Error{Op: "Get", URL: "https://api.example:6443/", Err: &net.DNSError{Err: "no such host", Name: "api.example", IsNotFound: true}},
			"does not resolve - did you specify the right host?", true},
		{"unauthorized", apierrors.NewUnauthorized("Unauthorized"), "does not accept these credentials", true},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")), "list and watch on pods", true},
		{"socket missing", fmt.Errorf("dial unix /run/containerd/containerd.sock: %w", os.ErrNotExist), "socket does not exist", true},
		{"timeout: retried, no hint", &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/", Err: errTimeout{}}, "", false},
		{"server error: retried", apierrors.NewInternalError(errors.New("etcd")), "", false},
		{"nil", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Hint(tc.err)
			if (tc.hint == "") != (h == "") || !strings.Contains(h, tc.hint) {
				t.Errorf("Hint = %q, want %q", h, tc.hint)
			}
			if got := Permanent(tc.err); got != tc.permanent {
				t.Errorf("Permanent = %v, want %v", got, tc.permanent)
			}
			if h != "" && !strings.HasSuffix(WithHint(tc.err).Error(), ": "+h) {
				t.Errorf("WithHint = %q", WithHint(tc.err))
			}
		})
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }
