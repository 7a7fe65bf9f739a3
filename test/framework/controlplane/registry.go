package controlplane

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
)

const registryReadyTimeout = 30 * time.Second

// Registry is a running registry.
type Registry struct {
	// Host is its host:port on loopback; it speaks plain HTTP.
	Host string
	// Dir is its storage.
	Dir string
}

// StartRegistry starts distribution's registry on a free loopback port,
// with its storage in a temporary directory, and waits until it answers.
// It is killed when the test ends; its log is printed if the test failed.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	bin, err := Binary("registry")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &Registry{Host: "127.0.0.1:" + strconv.Itoa(framework.FreePort(t)), Dir: filepath.Join(dir, "storage")}
	config := fmt.Sprintf(`version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
`, r.Dir, r.Host)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "registry.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// No OpenTelemetry traces: the registry would post them to a collector
	// on localhost:4318.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("registry log (last 8 KiB):\n%s", tail(data, 8<<10))
		}
	})
	ready := framework.Poll(registryReadyTimeout, 100*time.Millisecond, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	select {
	case <-exited:
		data, _ := os.ReadFile(logPath)
		t.Fatalf("registry exited:\n%s", tail(data, 8<<10))
	default:
	}
	if !ready {
		t.Fatalf("registry at %s did not answer /v2/ within %s", r.Host, registryReadyTimeout)
	}
	return r
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
