// Package cleanup is the deletion library of sweep's uninstall cleanups:
// it parses spectro-cleanup's config files strictly, removes node files
// without following a path out of its allowed roots, deletes cluster
// objects in parallel and waits for them with watches, and removes the
// cleanup workload itself with its RBAC in an order that keeps every right
// it needs to the end and leaks no cluster-scoped RBAC (SelfCleanup). The
// one-shot `sweepd cleanup` (package cleanup/oneshot) and the daemons'
// coordinated uninstall (package uninstall) are built on it.
package cleanup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Config file names inside the config directory, as spectro-cleanup names
// them.
const (
	FileConfigName     = "file-config.json"
	ResourceConfigName = "resource-config.json"
)

// ErrConfig marks an invalid configuration (flags or config files). Nothing
// has been deleted when an error wrapping it is returned.
var ErrConfig = errors.New("invalid cleanup configuration")

// ResourceEntry is one element of resource-config.json.
type ResourceEntry struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Resource  string `json:"resource"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// MustDelete makes a failure to delete this entry fail the run (exit 1)
	// and keeps the cleanup workload in place for inspection.
	MustDelete bool `json:"mustDelete,omitempty"`
	// LabelSelector narrows an unnamed entry; it is our extension.
	LabelSelector string `json:"labelSelector,omitempty"`
	// All says, in so many words, that the entry deletes every object of
	// its resource (in Namespace, if given): an entry without a name needs
	// it or a LabelSelector. Our extension; spectro-cleanup ignores the
	// key, so a config that has it runs there as before.
	All bool `json:"all,omitempty"`
}

// String names the entry for logs and the summary.
func (e ResourceEntry) String() string {
	gr := e.Resource
	if e.Group != "" {
		gr += "." + e.Group
	}
	s := gr + "/" + e.Version
	switch {
	case e.Name != "" && e.Namespace != "":
		s += " " + e.Namespace + "/" + e.Name
	case e.Name != "":
		s += " " + e.Name
	case e.Namespace != "":
		s += " " + e.Namespace + "/*"
	default:
		s += " *"
	}
	if e.LabelSelector != "" {
		s += " [" + e.LabelSelector + "]"
	}
	return s
}

// ParseFileConfig parses file-config.json: a JSON array of absolute paths,
// literal as in spectro-cleanup unless globbing is asked for
// (FileOptions.Globs). Empty input means no files. Where the paths may point is
// checked by CheckFilePaths, which needs the allowed roots.
func ParseFileConfig(data []byte) ([]string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var paths []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", len(paths), err)
		}
		p, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("element %d: want a string, got %s", len(paths), describeToken(tok))
		}
		if err := checkPathSyntax(p); err != nil {
			return nil, fmt.Errorf("element %d %q: %w", len(paths), p, err)
		}
		paths = append(paths, p)
	}
	if err := expectEnd(dec, ']'); err != nil {
		return nil, err
	}
	return paths, nil
}

func checkPathSyntax(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.ContainsRune(p, 0):
		return errors.New("path contains a NUL byte")
	case !filepath.IsAbs(p):
		return errors.New("path is not absolute")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return errors.New("path contains a .. element")
		}
	}
	return nil
}

// checkPattern checks the syntax of a path that is expanded as a glob.
func checkPattern(p string) error {
	if _, err := filepath.Match(p, ""); err != nil {
		return fmt.Errorf("bad glob pattern: %w", err)
	}
	return nil
}

// ParseResourceConfig parses resource-config.json strictly: an unknown or
// repeated key, a value of the wrong type or an incomplete entry is an error.
// Keys match case-insensitively, as they do for spectro-cleanup (Go's
// encoding/json), so its configs keep working. Empty input means no entries.
func ParseResourceConfig(data []byte) ([]ResourceEntry, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var entries []ResourceEntry
	for dec.More() {
		e, err := parseEntry(dec)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", len(entries), err)
		}
		entries = append(entries, e)
	}
	if err := expectEnd(dec, ']'); err != nil {
		return nil, err
	}
	return entries, nil
}

func parseEntry(dec *json.Decoder) (ResourceEntry, error) {
	var e ResourceEntry
	if err := expectDelim(dec, '{'); err != nil {
		return e, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return e, err
		}
		key, ok := tok.(string)
		if !ok {
			return e, fmt.Errorf("want a key, got %s", describeToken(tok))
		}
		lk := strings.ToLower(key)
		if seen[lk] {
			return e, fmt.Errorf("key %q given twice", key)
		}
		seen[lk] = true
		var dst *string
		switch lk {
		case "group":
			dst = &e.Group
		case "version":
			dst = &e.Version
		case "resource":
			dst = &e.Resource
		case "name":
			dst = &e.Name
		case "namespace":
			dst = &e.Namespace
		case "labelselector":
			dst = &e.LabelSelector
		case "mustdelete", "all":
			tok, err := dec.Token()
			if err != nil {
				return e, fmt.Errorf("key %q: %w", key, err)
			}
			b, ok := tok.(bool)
			if !ok {
				return e, fmt.Errorf("key %q: want true or false, got %s", key, describeToken(tok))
			}
			if lk == "all" {
				e.All = b
			} else {
				e.MustDelete = b
			}
			continue
		default:
			// The reason for strictness: spectro-cleanup ignores a misspelled
			// "name", which turns a single delete into delete-all.
			return e, fmt.Errorf("unknown key %q", key)
		}
		tok, err = dec.Token()
		if err != nil {
			return e, fmt.Errorf("key %q: %w", key, err)
		}
		s, ok := tok.(string)
		if !ok {
			return e, fmt.Errorf("key %q: want a string, got %s", key, describeToken(tok))
		}
		// A key that is there with nothing in it is most often a template's
		// value left unset: read as absent, an empty name or namespace
		// widens one delete to every object of the type, and an empty
		// selector selects everything.
		if lk != "group" && strings.TrimSpace(s) == "" {
			return e, fmt.Errorf("key %q is empty: give a value or remove the key", key)
		}
		*dst = s
	}
	if err := expectDelim(dec, '}'); err != nil {
		return e, err
	}
	return e, validateEntry(e)
}

func validateEntry(e ResourceEntry) error {
	switch {
	case e.Version == "":
		return errors.New(`"version" is required`)
	case e.Resource == "":
		return errors.New(`"resource" is required`)
	case strings.Contains(e.Resource, "/"):
		return fmt.Errorf("resource %q: subresources cannot be deleted", e.Resource)
	case strings.Contains(e.Version, "/"):
		return fmt.Errorf("version %q: put the group in \"group\"", e.Version)
	case e.Name != "" && e.LabelSelector != "":
		return errors.New(`"labelSelector" applies to unnamed entries only`)
	case e.All && e.Name != "":
		return errors.New(`"all" and "name" exclude each other: "all" deletes every object of the resource`)
	case e.All && e.LabelSelector != "":
		return errors.New(`"all" and "labelSelector" exclude each other: "all" deletes every object of the resource`)
	}
	if e.Group != "" {
		if errs := validation.IsDNS1123Subdomain(e.Group); len(errs) > 0 {
			return fmt.Errorf("group %q: %s", e.Group, strings.Join(errs, "; "))
		}
	}
	if e.Name != "" {
		if errs := content.IsPathSegmentName(e.Name); len(errs) > 0 {
			return fmt.Errorf("name %q: %s", e.Name, strings.Join(errs, "; "))
		}
	}
	if e.Namespace != "" {
		if errs := validation.IsDNS1123Label(e.Namespace); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %s", e.Namespace, strings.Join(errs, "; "))
		}
	}
	if e.LabelSelector != "" {
		sel, err := labels.Parse(e.LabelSelector)
		if err != nil {
			return fmt.Errorf("labelSelector: %w", err)
		}
		if sel.Empty() {
			return fmt.Errorf("labelSelector %q selects every object: use \"all\": true to say so", e.LabelSelector)
		}
	}
	if e.Name == "" && e.LabelSelector == "" && !e.All {
		// spectro-cleanup reads a missing name as every object of the
		// type; a name that a template left out must not delete them.
		what := e.Resource
		if e.Namespace != "" {
			what += " in namespace " + e.Namespace
		}
		return fmt.Errorf(`the entry names no object: give "name", a "labelSelector", or "all": true to delete every object of %s`, what)
	}
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %s", string(want), describeToken(tok))
	}
	return nil
}

func expectEnd(dec *json.Decoder, want json.Delim) error {
	if err := expectDelim(dec, want); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the top-level array")
	}
	return nil
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return fmt.Sprintf("%q", string(v))
	case string:
		return fmt.Sprintf("string %q", v)
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}

// Config is what a config directory asks for.
type Config struct {
	Files     []string
	Resources []ResourceEntry
	// Absent names the config file missing from the directory, if one
	// is: its list is empty.
	Absent []string
	// Unknown describes each other file in the directory, with a
	// did-you-mean where its name is close to a config file's. With both
	// config files there they are only worth a warning.
	Unknown []string
}

// LoadConfig reads and parses file-config.json and resource-config.json
// from dir. Either may be absent, as in spectro-cleanup: a missing
// file-config.json means no files, a missing resource-config.json no
// objects. It refuses, with an error wrapping ErrConfig, a directory that
// does not exist or has neither file (spectro-cleanup stopped without
// resource-config.json), and one that lacks either and has other files:
// one of them may be the missing one, misnamed, and running without it
// would pass a deletion that was asked for and not done for success. The
// kubelet's own entries in a mounted ConfigMap (..data, ..<timestamp>) are
// not other files; the config files there are symlinks, which are read.
func LoadConfig(dir string) (Config, error) {
	var cfg Config
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, fmt.Errorf("%w: config directory %s does not exist", ErrConfig, dir)
	}
	if err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	known := []string{FileConfigName, ResourceConfigName}
	present := map[string]bool{}
	for _, de := range des {
		name := de.Name()
		switch {
		case slices.Contains(known, name):
			present[name] = true
		case strings.HasPrefix(name, ".."):
			// The kubelet's: a ConfigMap key cannot start with "..".
		default:
			cfg.Unknown = append(cfg.Unknown, describeUnknown(name, known))
		}
	}
	for _, name := range known {
		if !present[name] {
			cfg.Absent = append(cfg.Absent, name)
		}
	}
	switch {
	case len(cfg.Absent) == len(known):
		what := "it has no other files"
		if len(cfg.Unknown) > 0 {
			what = "it has " + strings.Join(cfg.Unknown, ", ")
		}
		return cfg, fmt.Errorf("%w: config directory %s has neither %s nor %s: %s", ErrConfig, dir, FileConfigName, ResourceConfigName, what)
	case len(cfg.Absent) > 0 && len(cfg.Unknown) > 0:
		return cfg, fmt.Errorf("%w: config directory %s has no %s but has %s: name it %s, or remove what is not config",
			ErrConfig, dir, cfg.Absent[0], strings.Join(cfg.Unknown, ", "), cfg.Absent[0])
	}

	read := func(name string) ([]byte, error) {
		if !present[name] {
			return nil, nil
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return data, nil
	}
	data, err := read(FileConfigName)
	if err != nil {
		return cfg, err
	}
	if cfg.Files, err = ParseFileConfig(data); err != nil {
		return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, FileConfigName, err)
	}
	if data, err = read(ResourceConfigName); err != nil {
		return cfg, err
	}
	if cfg.Resources, err = ParseResourceConfig(data); err != nil {
		return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, ResourceConfigName, err)
	}
	return cfg, nil
}

// describeUnknown quotes name, with a did-you-mean if it is within a third
// of its length of a config file's name (files-config.json,
// resource-config.yaml).
func describeUnknown(name string, known []string) string {
	if c, ok := closest(name, known, max(2, len(name)/3)); ok {
		return fmt.Sprintf("%q (did you mean %s?)", name, c)
	}
	return strconv.Quote(name)
}
