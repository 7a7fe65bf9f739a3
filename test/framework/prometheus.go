package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Prometheus is a real Prometheus server, the one users run, for tests of
// what it makes of the daemon's metrics.
type Prometheus struct {
	// Base is the server's URL, http://127.0.0.1:port.
	Base string
}

// StartPrometheus starts the prometheus binary (Debian's package) scraping
// targets every second, with labels on their series (none when nil), and
// its data in a temporary directory. It is killed when the test ends; its
// log is printed if the test failed.
func StartPrometheus(t testing.TB, labels map[string]string, targets ...string) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is needed (Debian package prometheus; .ci/run installs it): %v", err)
	}
	dir := t.TempDir()
	static := map[string]any{"targets": targets}
	if labels != nil {
		static["labels"] = labels
	}
	config, err := json.Marshal(map[string]any{ // YAML is a superset of JSON
		"global":         map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"scrape_configs": []any{map[string]any{"job_name": "sweep", "static_configs": []any{static}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", data)
		}
	})
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err == nil {
		t.Logf("%s", bytes.SplitN(out, []byte("\n"), 2)[0])
	}
	return &Prometheus{Base: "http://" + addr}
}

// API GETs a Prometheus HTTP API path and decodes the data of a successful
// response into data.
func (p *Prometheus) API(path string, params url.Values, data any) error {
	resp, err := http.Get(p.Base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: HTTP %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: status %q: %s", path, body.Status, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// Query runs an instant query and returns its samples' values by series;
// an error is one Prometheus returned, or a result that is not a vector.
func (p *Prometheus) Query(expr string) (map[string]float64, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.API("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	out := map[string]float64{}
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprint(r.Metric)] = v
	}
	return out, nil
}

// Value runs an instant query and returns the value of its single sample;
// ok is false when Prometheus does not answer or the result is not one
// sample.
func (p *Prometheus) Value(expr string) (v float64, ok bool) {
	samples, err := p.Query(expr)
	if err != nil || len(samples) != 1 {
		return 0, false
	}
	for _, v := range samples {
		return v, true
	}
	return 0, false
}
