package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// TestSetupRoutesKlog checks that what client-go logs through klog ends up
// as lines of the command's own format, with its keys (issue 18: klog's
// plain text in --log-format=json logs).
func TestSetupRoutesKlog(t *testing.T) {
	t.Cleanup(klog.ClearLogger)
	for _, c := range []struct {
		name  string
		level string
		log   func()
		want  map[string]any // keys of the JSON line
	}{
		{"structured error, as reflectors log a failed watch", "info",
			func() { klog.ErrorS(errors.New("connection refused"), "Failed to watch", "resource", "pods") },
			map[string]any{"level": "ERROR", "msg": "Failed to watch", "error": "connection refused", "resource": "pods"}},
		{"klog warning: a WARN, without klog's header", "info",
			func() { klog.Warning("v1 ComponentStatus is deprecated") },
			map[string]any{"level": "WARN", "msg": "v1 ComponentStatus is deprecated"}},
		{"klog formatted warning", "warn",
			func() {
				klog.Warningf("Neither --kubeconfig nor --master was specified; %s", "using the inClusterConfig")
			},
			map[string]any{"level": "WARN", "msg": "Neither --kubeconfig nor --master was specified; using the inClusterConfig"}},
		{"klog unstructured error", "info",
			func() { klog.Errorf("failed to list %s", "pods") },
			map[string]any{"level": "ERROR", "msg": "failed to list pods"}},
		{"klog unstructured info", "info",
			func() { klog.Info("plain") },
			map[string]any{"level": "INFO", "msg": "plain"}},
		{"feature gate defaults dropped at debug", "debug",
			func() {
				klog.Background().V(1).Info("Feature gate default state", "feature", "WatchListClient", "enabled", true)
			},
			nil},
		{"a feature gate set from the environment still says so", "debug",
			func() {
				klog.Background().V(1).Info("Feature gate updated state", "feature", "WatchListClient", "enabled", false)
			},
			map[string]any{"level": "DEBUG", "msg": "Feature gate updated state", "feature": "WatchListClient"}},
		{"a reflector's V(2) failure is DEBUG, not DEBUG+2", "debug",
			func() {
				klog.Background().V(2).Info("watch-list failed - backing off", "reflector", "sweep-node-pods")
			},
			map[string]any{"level": "DEBUG", "msg": "watch-list failed - backing off"}},
		{"V(6) stays out of debug", "debug",
			func() { klog.Background().V(6).Info("very verbose") },
			nil},
		{"info", "info",
			func() { klog.InfoS("Caches populated", "type", "*v1.PartialObjectMetadata") },
			map[string]any{"level": "INFO", "msg": "Caches populated", "type": "*v1.PartialObjectMetadata"}},
		{"contextual logger with an error value", "info",
			func() { klog.Background().WithValues("err", "x").Info("with values") },
			map[string]any{"msg": "with values", "error": "x"}},
		{"the level still filters", "error",
			func() { klog.InfoS("Caches populated") },
			nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := Setup(&buf, "json", c.level); err != nil {
				t.Fatal(err)
			}
			c.log()
			klog.Flush()
			out := strings.TrimSpace(buf.String())
			t.Logf("logged: %s", out)
			if c.want == nil {
				if out != "" {
					t.Errorf("logged %q, want nothing", out)
				}
				return
			}
			if strings.Count(out, "\n") != 0 {
				t.Fatalf("want one line, got:\n%s", out)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(out), &line); err != nil {
				t.Fatalf("not a JSON line: %v\n%s", err, out)
			}
			for k, v := range c.want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v in %s", k, line[k], v, out)
				}
			}
			if _, ok := line["err"]; ok {
				t.Errorf("key err in %s, want error", out)
			}
		})
	}
}

// TestSetupAPIWarnings checks that the API server's warnings (the Warning
// header, as for a deprecated API) are WARN lines, not client-go's INFO.
func TestSetupAPIWarnings(t *testing.T) {
	t.Cleanup(klog.ClearLogger)
	t.Cleanup(func() { rest.SetDefaultWarningHandler(rest.WarningLogger{}) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 - "v1 ComponentStatus is deprecated in v1.19+"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	var buf bytes.Buffer
	if _, err := Setup(&buf, "json", "info"); err != nil {
		t.Fatal(err)
	}
	c, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get().AbsPath("/api/v1/componentstatuses").Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %q", err, buf.String())
	}
	if line["level"] != "WARN" || line["warning"] != "v1 ComponentStatus is deprecated in v1.19+" {
		t.Errorf("logged %s, want a WARN with the warning", buf.String())
	}
}

func TestParseKlogLine(t *testing.T) {
	for _, tc := range []struct {
		in    string
		level slog.Level
		msg   string
	}{
		{"W0301 14:32:05.123456   42 loader.go:12] deprecated\n", slog.LevelWarn, "deprecated"},
		{"E0301 14:32:05.123456   42 x.go:1] failed: a] b\n", slog.LevelError, "failed: a] b"},
		{"F0301 14:32:05.123456   42 x.go:1] fatal", slog.LevelError, "fatal"},
		{"I1231 23:59:59.000000 7 y.go:9] info\n", slog.LevelInfo, "info"},
		{"no header\n", slog.LevelInfo, "no header"},
		{"Wxyz0 not a header] at all", slog.LevelInfo, "Wxyz0 not a header] at all"},
		{"X0301 14:32:05.123456   42 x.go:1] unknown severity", slog.LevelInfo, "X0301 14:32:05.123456   42 x.go:1] unknown severity"},
		{"", slog.LevelInfo, ""},
	} {
		if lvl, msg := parseKlogLine([]byte(tc.in)); lvl != tc.level || msg != tc.msg {
			t.Errorf("parseKlogLine(%q) = %v, %q; want %v, %q", tc.in, lvl, msg, tc.level, tc.msg)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct{ format, level, want string }{
		{"xml", "info", "--log-format"},
		{"json", "verbose", "--log-level"},
	} {
		if _, err := New(&bytes.Buffer{}, c.format, c.level); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q) = %v, want an error about %s", c.format, c.level, err, c.want)
		}
	}
}

// TestDurations: a time.Duration is logged as its String ("30s") in both
// formats, however it reaches the handler: an attribute of the record, of
// With, in a group, or from klog (issue 44, part 5: JSON logs said
// "deleted_pod_grace":30000000000).
func TestDurations(t *testing.T) {
	t.Cleanup(klog.ClearLogger)
	for _, c := range []struct {
		name string
		log  func(*slog.Logger)
		json string // substring of the JSON line
		text string // substring of the text line
	}{
		{"attribute", func(l *slog.Logger) { l.Info("daemon", "deleted_pod_grace", 30*time.Second) },
			`"deleted_pod_grace":"30s"`, "deleted_pod_grace=30s"},
		{"sub-second", func(l *slog.Logger) { l.Info("x", "yield", 1500*time.Microsecond) },
			`"yield":"1.5ms"`, "yield=1.5ms"},
		{"With", func(l *slog.Logger) { l.With("min_age", 15*time.Minute).Info("x") },
			`"min_age":"15m0s"`, "min_age=15m0s"},
		{"in a group", func(l *slog.Logger) { l.Info("x", slog.Group("cni_del", "timeout", 2*time.Second)) },
			`"cni_del":{"timeout":"2s"}`, "cni_del.timeout=2s"},
		{"from klog", func(*slog.Logger) { klog.InfoS("backing off", "delay", 800*time.Millisecond) },
			`"delay":"800ms"`, "delay=800ms"},
		{"a number stays a number", func(l *slog.Logger) { l.Info("x", "files", 3, "duration_seconds", 1.5) },
			`"files":3,"duration_seconds":1.5`, "files=3 duration_seconds=1.5"},
	} {
		for _, f := range []struct{ format, want string }{{"json", c.json}, {"text", c.text}} {
			t.Run(c.name+"/"+f.format, func(t *testing.T) {
				var buf bytes.Buffer
				l, err := Setup(&buf, f.format, "info")
				if err != nil {
					t.Fatal(err)
				}
				c.log(l)
				klog.Flush()
				if !strings.Contains(buf.String(), f.want) {
					t.Errorf("logged %q, want %q in it", buf.String(), f.want)
				}
			})
		}
	}
}

// TestKlogRepeats: client-go's repeated warnings and errors (a reflector
// retrying a failed watch) are logged once per klogRepeatEvery, the next
// saying how many were suppressed; other messages and levels are apart,
// and INFO and DEBUG pass unlimited.
func TestKlogRepeats(t *testing.T) {
	var buf bytes.Buffer
	base, err := New(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	h := klogHandler{Handler: base.Handler(), limit: newRepeatLimit(30*time.Second, func() time.Time { return now })}
	log := slog.New(h)
	for range 10 {
		log.Error("Failed to watch", "resource", "pods")
	}
	log.Warn("Failed to watch") // another level: its own
	log.Error("Failed to list") // another message: its own
	log.Info("Starting reflector")
	log.Info("Starting reflector")
	now = now.Add(31 * time.Second)
	log.Error("Failed to watch", "resource", "pods")

	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		lines = append(lines, m)
	}
	want := []struct {
		level, msg string
		suppressed any
	}{
		{"ERROR", "Failed to watch", nil},
		{"WARN", "Failed to watch", nil},
		{"ERROR", "Failed to list", nil},
		{"INFO", "Starting reflector", nil},
		{"INFO", "Starting reflector", nil},
		{"ERROR", "Failed to watch", float64(9)},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if lines[i]["level"] != w.level || lines[i]["msg"] != w.msg || lines[i]["suppressed"] != w.suppressed {
			t.Errorf("line %d: %v; want level %s msg %q suppressed %v", i, lines[i], w.level, w.msg, w.suppressed)
		}
	}
}
