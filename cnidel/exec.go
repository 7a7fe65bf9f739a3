package cnidel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"
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
	// root, when set, is the directory each plugin runs chrooted into
	// (Options.Root); the plugin paths are inside it.
	root string
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
	if e.root != "" {
		// The child chroots, then enters the root's / (never left in a
		// directory outside it), then executes pluginPath, which
		// FindInPath resolved inside the root as the kernel will now.
		cmd.SysProcAttr.Chroot = e.root
		cmd.Dir = "/"
	}
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

// FindInPath implements invoke.Exec. With a root, the plugin is looked
// up inside it, as the chrooted execve will find it, and its path inside
// the root is returned; as libcni's, a name with a slash is refused, so a
// plugin comes only from the plugin directories.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	if e.root == "" {
		return invoke.FindInPath(plugin, paths)
	}
	if plugin == "" || strings.ContainsRune(plugin, os.PathSeparator) {
		return "", fmt.Errorf("invalid plugin name: %q", plugin)
	}
	for _, dir := range paths {
		path := filepath.Join(dir, plugin)
		var st unix.Stat_t
		if err := statIn(e.root, path, 0, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("failed to find plugin %q in path %s inside the root %s", plugin, paths, e.root)
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
