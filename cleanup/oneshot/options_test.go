package oneshot

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/internal/field"
)

// TestComplete checks the derivations spectro-cleanup makes from its flags.
func TestComplete(t *testing.T) {
	tests := []struct {
		name       string
		o          Options
		wantSelf   cleanup.Self
		wantNoWait bool
		wantWait   bool
		wantLog    string
	}{
		{name: "defaults", o: Options{Blocking: true, DeletionTimeout: 300 * time.Second, CleanupTimeout: 30 * time.Second}},
		{name: "self", o: Options{DeletionTimeout: time.Second, SelfGVR: "batch/v1/jobs", Self: cleanup.Self{Name: "j", Namespace: "ns"}},
			wantSelf: cleanup.Self{GVR: schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, Name: "j", Namespace: "ns"}},
		{name: "a GVR without a name is not parsed", o: Options{DeletionTimeout: time.Second, SelfGVR: "jobs"}},
		{name: "ClusterRole without binding", o: Options{DeletionTimeout: time.Second, Self: cleanup.Self{ClusterRole: "cr"}},
			wantSelf: cleanup.Self{ClusterRole: "cr", ClusterRoleBinding: DefaultRoleBinding}, wantLog: "--cluster-role-binding-name not given"},
		{name: "binding without ClusterRole", o: Options{DeletionTimeout: time.Second, Self: cleanup.Self{ClusterRoleBinding: "crb"}},
			wantSelf: cleanup.Self{ClusterRole: DefaultRole, ClusterRoleBinding: "crb"}, wantLog: "--cluster-role-name not given"},
		{name: "zero deletion timeout checks once", o: Options{Blocking: true}, wantNoWait: true},
		{name: "not blocking waits", o: Options{DeletionTimeout: time.Second, CleanupTimeout: time.Second}, wantWait: true},
		{name: "finalize server waits", o: Options{Blocking: true, EnableFinalizeServer: true, DeletionTimeout: time.Second, CleanupTimeout: time.Second}, wantWait: true},
		{name: "zero cleanup timeout never waits", o: Options{EnableFinalizeServer: true, DeletionTimeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			o := tt.o
			if err := o.Complete(log); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if o.Self != tt.wantSelf || o.NoDeletionWait != tt.wantNoWait || o.WaitBeforeSelfDelete != tt.wantWait || o.Log != log {
				t.Errorf("got Self %+v, NoDeletionWait %v, WaitBeforeSelfDelete %v, Log set %v; want %+v, %v, %v, true",
					o.Self, o.NoDeletionWait, o.WaitBeforeSelfDelete, o.Log == log, tt.wantSelf, tt.wantNoWait, tt.wantWait)
			}
			if tt.wantLog == "" && logs.Len() > 0 || !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log %q, want %q", logs.String(), tt.wantLog)
			}
			if err := o.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestCompleteBadGVR(t *testing.T) {
	o := Options{SelfGVR: "jobs", Self: cleanup.Self{Name: "j"}}
	err := o.Complete(nil)
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "SelfGVR" || !errors.Is(err, cleanup.ErrConfig) {
		t.Fatalf("err %v: want a *field.Error for SelfGVR wrapping ErrConfig", err)
	}
}

// TestCompleteRate: a config without a rate gets 50 requests per second,
// one with its own keeps it.
func TestCompleteRate(t *testing.T) {
	for _, tt := range []struct {
		qps, wantQPS     float32
		burst, wantBurst int
	}{{0, 50, 0, 100}, {7, 7, 9, 9}} {
		o := Options{RESTConfig: func() (*rest.Config, error) { return &rest.Config{QPS: tt.qps, Burst: tt.burst}, nil }}
		if err := o.Complete(nil); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != tt.wantQPS || cfg.Burst != tt.wantBurst {
			t.Errorf("QPS %v burst %d: got %v %d, want %v %d", tt.qps, tt.burst, cfg.QPS, cfg.Burst, tt.wantQPS, tt.wantBurst)
		}
	}
	var o Options
	if err := o.Complete(nil); err != nil || o.RESTConfig != nil {
		t.Errorf("without a RESTConfig: err %v, RESTConfig set %v", err, o.RESTConfig != nil)
	}
}

func TestValidate(t *testing.T) {
	o := Options{Self: cleanup.Self{ClusterRole: "cr"}}
	if err := o.Validate(); !errors.Is(err, cleanup.ErrConfig) {
		t.Fatalf("err %v: a ClusterRole without its binding must be refused", err)
	}
}
