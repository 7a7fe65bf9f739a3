package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultAllowedRoot is where the cleanup image expects the host's
// filesystem to be mounted.
const DefaultAllowedRoot = "/host"

// FileOptions configures RemoveFiles.
type FileOptions struct {
	// AllowedRoots are the directories paths must lie under; default
	// DefaultAllowedRoot.
	AllowedRoots []string
	// Globs expands shell patterns (*, ?, [...]) in the paths. Off, every
	// path is literal, as in spectro-cleanup: a pattern there was a
	// harmless not-found, and expanding it now would empty directories
	// (say /host/opt/cni/bin/*) that a config copied from it never emptied.
	Globs bool
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	Log    *slog.Logger
}

func (o FileOptions) roots() []string {
	if len(o.AllowedRoots) == 0 {
		return []string{DefaultAllowedRoot}
	}
	return o.AllowedRoots
}

// CheckFilePaths checks, without touching the filesystem, that every path is
// well-formed (a valid pattern, with globs) and lies lexically under one of
// roots (and is not a root itself). Symlinks are dealt with when removing.
// The error wraps ErrConfig.
func CheckFilePaths(paths, roots []string, globs bool) error {
	for _, r := range roots {
		if !filepath.IsAbs(r) || filepath.Clean(r) != r {
			return fmt.Errorf("%w: allowed root %q must be a clean absolute path", ErrConfig, r)
		}
	}
	for _, p := range paths {
		if err := checkPathSyntax(p); err != nil {
			return fmt.Errorf("%w: path %q: %w", ErrConfig, p, err)
		}
		if globs {
			if err := checkPattern(p); err != nil {
				return fmt.Errorf("%w: path %q: %w", ErrConfig, p, err)
			}
		}
		if _, _, err := splitRoot(p, roots); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// splitRoot returns the longest allowed root that p lies under and p
// relative to it, slash-separated as fs.FS and os.Root want it.
func splitRoot(p string, roots []string) (root, rel string, err error) {
	clean := filepath.Clean(p)
	for _, r := range roots {
		var rest string
		switch {
		case r == "/":
			rest = strings.TrimPrefix(clean, "/")
		case strings.HasPrefix(clean, r+"/"):
			rest = clean[len(r)+1:]
		default:
			continue
		}
		if rest == "" {
			continue
		}
		if len(r) > len(root) {
			root, rel = r, rest
		}
	}
	if root == "" {
		return "", "", fmt.Errorf("path %q is not under an allowed root (%s)", p, strings.Join(roots, ", "))
	}
	return root, filepath.ToSlash(rel), nil
}

// RemoveFiles removes the files and empty directories that paths name (or,
// with opts.Globs, match). Every lookup goes through an os.Root opened on the allowed root, so
// no symlink can lead out of it (absolute symlinks are refused too, since
// they would point into this container, not the host); the last component
// is never followed, so a symlink is removed rather than its target. A
// missing file or a non-empty directory is skipped. Failures are recorded in
// sum and do not stop the other paths; the error is for invalid paths only.
func RemoveFiles(ctx context.Context, paths []string, opts FileOptions, sum *Summary) error {
	log := logger(opts.Log)
	roots := opts.roots()
	if err := CheckFilePaths(paths, roots, opts.Globs); err != nil {
		return err
	}
	opened := map[string]*os.Root{}
	defer func() {
		for _, r := range opened {
			_ = r.Close()
		}
	}()
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		rootDir, rel, _ := splitRoot(p, roots)
		root, ok := opened[rootDir]
		if !ok {
			var err error
			root, err = os.OpenRoot(rootDir)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					recordFile(log, sum, p, Skipped, "allowed root "+rootDir+" does not exist")
					continue
				}
				recordFile(log, sum, p, Failed, err.Error())
				continue
			}
			opened[rootDir] = root
		}
		if !opts.Globs || !hasMeta(rel) {
			removeOne(log, root, rootDir, rel, opts.DryRun, sum)
			continue
		}
		// fs.Glob lists directories through the root and matches names
		// without following the last component.
		matches, err := fs.Glob(root.FS(), rel)
		if err != nil {
			recordFile(log, sum, p, Failed, err.Error())
			continue
		}
		if len(matches) == 0 {
			recordFile(log, sum, p, Skipped, "no match")
			continue
		}
		// Deepest first, so that a directory emptied by this pattern can go
		// too.
		for i := len(matches) - 1; i >= 0; i-- {
			removeOne(log, root, rootDir, matches[i], opts.DryRun, sum)
		}
	}
	return nil
}

func removeOne(log *slog.Logger, root *os.Root, rootDir, rel string, dryRun bool, sum *Summary) {
	full := filepath.Join(rootDir, filepath.FromSlash(rel))
	fi, err := root.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			recordFile(log, sum, full, Skipped, "not found")
			return
		}
		recordFile(log, sum, full, Failed, "refused: "+err.Error())
		return
	}
	if fi.IsDir() {
		empty, err := dirEmpty(root, rel)
		if err != nil {
			recordFile(log, sum, full, Failed, err.Error())
			return
		}
		if !empty {
			recordFile(log, sum, full, Skipped, "directory not empty")
			return
		}
	}
	if dryRun {
		recordFile(log, sum, full, WouldDelete, "")
		return
	}
	err = root.Remove(rel)
	switch {
	case err == nil:
		recordFile(log, sum, full, Deleted, "")
	case errors.Is(err, fs.ErrNotExist):
		recordFile(log, sum, full, Skipped, "not found")
	case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
		recordFile(log, sum, full, Skipped, "directory not empty")
	default:
		recordFile(log, sum, full, Failed, err.Error())
	}
}

func dirEmpty(root *os.Root, rel string) (bool, error) {
	f, err := root.Open(rel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.ReadDir(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

func recordFile(log *slog.Logger, sum *Summary, path string, o Outcome, reason string) {
	lvl := slog.LevelInfo
	if o == Failed {
		lvl = slog.LevelError
	}
	log.Log(context.Background(), lvl, "file", "path", path, "outcome", string(o), "reason", reason)
	sum.Add(Record{Phase: PhaseFile, Object: path, Outcome: o, Reason: reason})
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
