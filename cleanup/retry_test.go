package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &url.Error{Op: "Delete", URL: "https://x", Err: syscall.ECONNREFUSED}, true},
		{"connection reset", &url.Error{Op: "Delete", URL: "https://x", Err: syscall.ECONNRESET}, true},
		{"body cut off", fmt.Errorf("unexpected error when reading response body. Please retry. Original error: %w", io.ErrUnexpectedEOF), true},
		{"EOF", &url.Error{Op: "Delete", URL: "https://x", Err: io.EOF}, true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"not found", apierrors.NewNotFound(gr, "a"), false},
		{"conflict", apierrors.NewConflict(gr, "a", errors.New("uid")), false},
		{"forbidden", apierrors.NewForbidden(gr, "a", errors.New("rbac")), false},
		{"invalid", apierrors.NewBadRequest("no"), false},
		{"cancelled", context.Canceled, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := transient(tt.err); got != tt.want {
				t.Fatalf("transient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestRetryTransient(t *testing.T) {
	calls := 0
	err := retryTransient(t.Context(), func() error {
		calls++
		if calls < 3 {
			return apierrors.NewServiceUnavailable("starting")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls; want success on the third", err, calls)
	}
	calls = 0
	err = retryTransient(t.Context(), func() error { calls++; return apierrors.NewNotFound(schema.GroupResource{}, "a") })
	if !apierrors.IsNotFound(err) || calls != 1 {
		t.Fatalf("err %v after %d calls; want the answer at once", err, calls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls = 0
	_ = retryTransient(ctx, func() error { calls++; return apierrors.NewServiceUnavailable("x") })
	if calls != 1 {
		t.Fatalf("%d calls after cancellation, want 1", calls)
	}
}
