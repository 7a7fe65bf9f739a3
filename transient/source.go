package transient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Sources are the ConfigMap contents as given on the command line, with the
// meaning of `kubectl create configmap`'s flags of the same names.
type Sources struct {
	// Literals are key=value pairs (--from-literal).
	Literals []string
	// Files are [key=]path entries (--from-file); a directory contributes each
	// regular file in it under its base name.
	Files []string
	// EnvFiles are paths of files of KEY=value lines (--from-env-file).
	EnvFiles []string
}

// Data is the content of a ConfigMap: UTF-8 values in Data, others in Binary.
type Data struct {
	Data   map[string]string
	Binary map[string][]byte
}

// Load reads every source. getenv resolves env-file lines that name a variable
// without a value (os.Getenv in the plugin; injected so tests stay hermetic).
func (s Sources) Load(getenv func(string) string) (Data, error) {
	d := Data{Data: map[string]string{}, Binary: map[string][]byte{}}
	for _, src := range s.Literals {
		key, value, err := ParseLiteral(src)
		if err != nil {
			return Data{}, err
		}
		if err := d.add(key, value); err != nil {
			return Data{}, err
		}
	}
	for _, src := range s.Files {
		if err := d.addFileSource(src); err != nil {
			return Data{}, err
		}
	}
	for _, p := range s.EnvFiles {
		if err := d.addEnvFile(p, getenv); err != nil {
			return Data{}, err
		}
	}
	if n := d.Size(); n > MaxConfigMapSize {
		return Data{}, fmt.Errorf("the ConfigMap's data is %d bytes, more than the API server accepts (%d, 1 MiB)", n, MaxConfigMapSize)
	}
	return d, nil
}

// MaxConfigMapSize is the API server's limit on a ConfigMap's values
// (data and binaryData together; keys do not count). Load checks it, so that
// a run fails before its first request rather than after creating its Job.
const MaxConfigMapSize = 1 << 20

// Size is what the API server counts against MaxConfigMapSize.
func (d Data) Size() int {
	n := 0
	for _, v := range d.Data {
		n += len(v)
	}
	for _, v := range d.Binary {
		n += len(v)
	}
	return n
}

// ParseLiteral splits a --from-literal source at its first '='; the value may
// contain more '=' and may be empty, the key may not.
func ParseLiteral(src string) (key, value string, err error) {
	key, value, ok := strings.Cut(src, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("invalid literal source %q, expected key=value", src)
	}
	return key, value, nil
}

// ParseFileSource splits a --from-file source into key and path. Without a
// key the key is the path's base name; '=' may appear at most once because it
// would make the split ambiguous.
func ParseFileSource(src string) (key, path string, err error) {
	switch strings.Count(src, "=") {
	case 0:
		if src == "" {
			return "", "", errors.New("empty file source")
		}
		return baseName(src), src, nil
	case 1:
		key, path, _ = strings.Cut(src, "=")
		if key == "" {
			return "", "", fmt.Errorf("key name for file path %q missing", path)
		}
		if path == "" {
			return "", "", fmt.Errorf("file path for key name %q missing", key)
		}
		return key, path, nil
	default:
		return "", "", fmt.Errorf("invalid file source %q: key names or file paths cannot contain '='", src)
	}
}

// baseName is the key of a file source given without a key; kubectl uses the
// slash-separated base name, so "dir/" yields "dir" and is then read as a
// directory.
func baseName(p string) string {
	return path.Base(filepath.ToSlash(p))
}

// ParseEnvLine parses one line of an env file. A blank line or a comment
// yields an empty key. A line without '=' names a variable whose value comes
// from getenv. Leading white space is ignored, as kubectl does; the value is
// taken verbatim (no quotes are removed) because that is what kubectl does and
// users' env files rely on it.
func ParseEnvLine(line []byte, getenv func(string) string) (key, value string, err error) {
	if !utf8.Valid(line) {
		return "", "", errors.New("invalid UTF-8")
	}
	line = bytes.TrimLeftFunc(line, unicode.IsSpace)
	if len(line) == 0 || line[0] == '#' {
		return "", "", nil
	}
	key, value, hasValue := strings.Cut(string(line), "=")
	if errs := validation.IsEnvVarName(key); len(errs) > 0 {
		return "", "", fmt.Errorf("%q is not a valid key name: %s", key, strings.Join(errs, "; "))
	}
	if !hasValue {
		value = getenv(key)
	}
	return key, value, nil
}

// ParseEnvFile parses the content of an env file, calling add for each pair in
// file order. A UTF-8 byte order mark at the start is ignored.
func ParseEnvFile(r io.Reader, getenv func(string) string, add func(key, value string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // a ConfigMap holds at most 1 MiB anyway
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		key, value, err := ParseEnvLine(line, getenv)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if key == "" {
			continue
		}
		if err := add(key, value); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

func (d *Data) addFileSource(src string) error {
	key, p, err := ParseFileSource(src)
	if err != nil {
		return err
	}
	info, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if !info.IsDir() {
		return d.addFile(key, p)
	}
	if strings.Contains(src, "=") {
		return fmt.Errorf("cannot give a key name for a directory path: %s", src)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	for _, e := range entries {
		// Only regular files, as kubectl: subdirectories and symlinks (which
		// could point anywhere) are skipped.
		if e.Type().IsRegular() {
			if err := d.addFile(e.Name(), filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Data) addFile(key, p string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if utf8.Valid(b) {
		return d.add(key, string(b))
	}
	if err := d.checkKey(key); err != nil {
		return err
	}
	d.Binary[key] = b
	return nil
}

func (d *Data) addEnvFile(p string, getenv func(string) string) error {
	info, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if info.IsDir() {
		return fmt.Errorf("env file %s is a directory", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	if err := ParseEnvFile(f, getenv, d.add); err != nil {
		return fmt.Errorf("env file %s: %w", p, err)
	}
	return nil
}

func (d *Data) add(key, value string) error {
	if err := d.checkKey(key); err != nil {
		return err
	}
	d.Data[key] = value
	return nil
}

// checkKey refuses invalid and duplicate keys: a later source silently
// overwriting an earlier one would hide a mistake on the command line.
func (d *Data) checkKey(key string) error {
	if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
		return fmt.Errorf("%q is not a valid ConfigMap key: %s", key, strings.Join(errs, "; "))
	}
	_, inData := d.Data[key]
	_, inBinary := d.Binary[key]
	if inData || inBinary {
		return fmt.Errorf("duplicate ConfigMap key %q", key)
	}
	return nil
}
