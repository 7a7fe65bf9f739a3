package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults of WatchOptions.
const (
	DefaultDebounce = 500 * time.Millisecond
	DefaultResync   = 30 * time.Second
)

// WatchOptions configures Watch.
type WatchOptions struct {
	// Debounce is how long the directory must stay quiet after an event
	// before it is read: a projection or an editor makes several changes.
	Debounce time.Duration
	// Resync re-reads the directory this often even without events, the
	// safety net for a missed event or a directory created later.
	Resync time.Duration
	Log    *slog.Logger
}

// Watch sends a Snapshot of dir on out whenever its content differs from the
// last one sent (the first reading is always sent, even if empty), until ctx
// ends. It reacts to any change in dir itself: the kubelet's ..data swap is
// a rename in dir, and so is an atomic save into a plain directory; writes
// in place are seen too. A directory that does not exist yet is waited for.
func Watch(ctx context.Context, dir string, opts WatchOptions, out chan<- Snapshot) error {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("fsnotify: %w", err)
	}
	defer func() { _ = w.Close() }()

	watching := false
	addWatch := func() {
		if watching {
			return
		}
		if err := w.Add(dir); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cannot watch the cleanup config directory; re-reading it periodically", "dir", dir, "error", err)
			}
			return
		}
		watching = true
	}
	addWatch()

	var (
		lastHash string
		sent     bool
	)
	read := func() {
		s, err := ReadSnapshot(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cannot read the cleanup config directory", "dir", dir, "error", err)
				return
			}
			s = Snapshot{}
		}
		if h := s.Hash(); !sent || h != lastHash {
			select {
			case out <- s:
				lastHash, sent = h, true
			case <-ctx.Done():
			}
		}
	}
	read()

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	resync := time.NewTicker(opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("fsnotify watcher closed")
			}
			log.Debug("cleanup config directory event", "name", ev.Name, "op", ev.Op.String())
			if ev.Name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away: watch it again once it
				// is back (resync).
				watching = false
			}
			debounce.Reset(opts.Debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("fsnotify watcher closed")
			}
			// An overflow means lost events: re-read.
			log.Warn("fsnotify error; re-reading", "dir", dir, "error", err)
			debounce.Reset(opts.Debounce)
		case <-debounce.C:
			read()
		case <-resync.C:
			if _, err := os.Stat(dir); err == nil {
				addWatch()
			}
			read()
		}
	}
}
