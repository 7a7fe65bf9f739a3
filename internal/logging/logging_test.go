package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
		{"warning, as client-go logs the API server's warnings", "info",
			func() { klog.Warning("v1 ComponentStatus is deprecated") },
			map[string]any{"msg": "v1 ComponentStatus is deprecated"}},
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
