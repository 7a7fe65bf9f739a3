package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RunTool runs a command and returns its stdout; it fails the test, with
// stderr, when the command fails.
func RunTool(t testing.TB, stdin io.Reader, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// LineDiff lists the lines only in a (-) and only in b (+): enough to see
// what changed in a generated file or a listing.
func LineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var d strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			fmt.Fprintf(&d, "-%s\n", l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			fmt.Fprintf(&d, "+%s\n", l)
		}
	}
	return d.String()
}

// EqualJSON reports whether a and b encode to the same JSON.
func EqualJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// ToolModuleDir returns the directory of module in Go's module cache, at the
// version hack/tools/TOOL's go.mod requires (hack/build-tools.sh downloads
// it): for the manifests a tool's module ships (CRDs), which tests install.
// The test's package must be two levels under the repository's root.
func ToolModuleDir(t testing.TB, tool, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = filepath.Join("../..", "hack", "tools", tool)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("locate %s (hack/build-tools.sh %s): %v", module, tool, err)
	}
	return dir
}
