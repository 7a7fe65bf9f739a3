package cleanup

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRetryTransientOutlastsARestart: a request refused seven times in a row
// (about 16 s of backoff, an API server restarting on a loaded node) still
// goes through. wait.Backoff, used before, ended the retries once its delay
// reached the 5 s cap, after six attempts, and the cleanup recorded the
// object as failed and went on without it.
func TestRetryTransientOutlastsARestart(t *testing.T) {
	refused := fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	calls := 0
	err := retryTransient(t.Context(), func() error {
		calls++
		if calls <= 7 {
			return refused
		}
		return nil
	})
	if err != nil || calls != 8 {
		t.Fatalf("err %v after %d calls, want success on the 8th", err, calls)
	}
}

func TestRetryTransientStops(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("no"))
	calls := 0
	if err := retryTransient(t.Context(), func() error { calls++; return forbidden }); !apierrors.IsForbidden(err) || calls != 1 {
		t.Fatalf("err %v after %d calls: an answer about the request is not retried", err, calls)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	if err := retryTransient(ctx, func() error { return refused }); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v: the last error is returned when the context ends", err)
	}
}
