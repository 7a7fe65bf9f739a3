package main

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/sweep-k8s/sweep/daemon"
)

// TestDaemonFlagsCoverConfig: every field of daemon.Config, down through
// each package's configuration, is set by a flag of `sweepd daemon` that
// daemonFlags names, or is listed below with why no flag sets it; every
// flag of the command sets a field or is listed below; and daemonFlags
// names no field that does not exist. A field added without its flag, a
// flag without its field, or a renamed field fails here.
func TestDaemonFlagsCoverConfig(t *testing.T) {
	noFlag := map[string]string{
		"Prune.MaxFileSize":         "a bound on what is read of a file; real ones are a few KiB",
		"Prune.HostLocalLockWait":   "host-local holds its lock for milliseconds",
		"Prune.ProgressInterval":    "the progress log's pace",
		"CNIDel.ScratchDir":         "os.TempDir(): the DELs' private libcni caches, in the container's own /tmp",
		"CNIDel.Observe":            "the daemon's histogram of DELs",
		"Uninstall.DeletionTimeout": "the cleanup's default; the chart never needed another",
		"Uninstall.Watch.Resync":    "the watch's default safety net",
		"Uninstall.Watch.Log":       "the daemon's logger",
	}
	noField := map[string]string{
		"log-format": "the logger's, made in main", "log-level": "the logger's, made in main",
		"help":            "cobra's",
		"cleanup-timeout": "a deprecated spelling of --cleanup-barrier-timeout",
	}
	fields := map[string]bool{}
	configPaths(reflect.TypeFor[daemon.Config](), "", fields)
	flags := daemonFlags()
	for path, leaf := range fields {
		if _, ok := flags[path]; !ok && leaf && noFlag[path] == "" {
			t.Errorf("daemon.Config field %s: no flag sets it (add it to daemonFlags with its flag, or say here why none does)", path)
		}
	}
	for path := range flags {
		if _, ok := fields[path]; !ok {
			t.Errorf("daemonFlags names %s, which is no field of daemon.Config", path)
		}
	}
	for path := range noFlag {
		if _, ok := fields[path]; !ok {
			t.Errorf("the list of fields without a flag names %s, which is no field of daemon.Config", path)
		}
	}
	root := newRootCommand(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{"daemon"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.InitDefaultHelpFlag()
	set := map[string]bool{}
	for _, f := range flags {
		set[f] = true
	}
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		seen[f.Name] = true
		if !set[f.Name] && noField[f.Name] == "" {
			t.Errorf("flag --%s of sweepd daemon sets no field of daemon.Config that daemonFlags names", f.Name)
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	for f := range set {
		if !seen[f] {
			t.Errorf("daemonFlags names --%s, which sweepd daemon does not have", f)
		}
	}
}

// configPaths adds the paths of the fields of t ("Prune.MinAge") to paths,
// true for a leaf: each struct of this module, or pointer to one, is walked
// into, as its fields are what flags set.
func configPaths(t reflect.Type, prefix string, paths map[string]bool) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		path := prefix + f.Name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		own := strings.HasPrefix(ft.PkgPath(), "github.com/sweep-k8s/sweep/")
		if ft.Kind() == reflect.Struct && own {
			paths[path] = false
			configPaths(ft, path+".", paths)
			continue
		}
		paths[path] = true
	}
}
