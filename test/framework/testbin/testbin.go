// Package testbin builds the project's commands for end-to-end tests, once per
// test binary, so that tests run the same executables users do.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type result struct {
	path string
	err  error
}

// builds is per test binary: each package's tests build at most once per
// command. The test binary is the only owner of this state.
var (
	mu     sync.Mutex
	builds = map[string]*result{}
	dir    string
)

// Build builds the command in the module-relative package pkg (such as
// "./cmd/sweepd") and returns the path of the executable. It fails the test
// if the build fails.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return buildOnce(t, pkg, false)
}

// BuildStatic is Build without cgo, as the Dockerfile builds: the executable
// runs in an image that has no libc.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	return buildOnce(t, pkg, true)
}

func buildOnce(t testing.TB, pkg string, static bool) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := fmt.Sprintf("%s static=%t", pkg, static)
	r, ok := builds[key]
	if !ok {
		r = &result{}
		r.path, r.err = build(pkg, static)
		builds[key] = r
	}
	if r.err != nil {
		t.Fatalf("build %s: %v", pkg, r.err)
	}
	return r.path
}

func build(pkg string, static bool) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if dir == "" {
		// Shared by all tests of this binary; removed by the OS's tmp
		// cleaning, since no single test owns it.
		if dir, err = os.MkdirTemp("", "sweep-testbin-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if static {
		out += "-static"
		cmd = exec.Command("go", "build", "-trimpath", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, msg)
	}
	return out, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(gomod), nil
}
