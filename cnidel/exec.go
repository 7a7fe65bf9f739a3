package cnidel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// maxOutput bounds what is kept of a plugin's stdout and stderr: a DEL
// prints nothing or one error object.
const maxOutput = 64 << 10

// pluginExec runs plugins like libcni's RawExec, but with a deadline per
// call that kills the plugin's whole process group (bridge runs host-local
// as a child) and bounded output, so a hung or chatty plugin can neither
// stall the prune nor grow the daemon.
type pluginExec struct {
	timeout time.Duration
}

var _ invoke.Exec = (*pluginExec)(nil)

// ExecPlugin implements invoke.Exec.
func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var stdout, stderr limitedBuffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild that inherited the pipes must not keep Wait waiting.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("plugin %s: %w after %s", pluginPath, ctx.Err(), e.timeout)
	}
	// As RawExec: a plugin reports its error as a JSON object on stdout.
	msg := types.Error{}
	switch {
	case stdout.Len() > 0 && json.Unmarshal(stdout.Bytes(), &msg) == nil && msg.Msg != "":
		return nil, &msg
	case stderr.Len() > 0:
		return nil, fmt.Errorf("plugin %s failed: %q: %w", pluginPath, stderr.Bytes(), err)
	default:
		return nil, fmt.Errorf("plugin %s failed with no error message: %w", pluginPath, err)
	}
}

// FindInPath implements invoke.Exec.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// Decode implements invoke.Exec.
func (e *pluginExec) Decode(data []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(data)
}

// limitedBuffer keeps the first maxOutput bytes and drops the rest, without
// failing the writer (a plugin must not die of SIGPIPE half-way).
type limitedBuffer struct {
	bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}
