package transient

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseLiteral(t *testing.T) {
	tests := []struct {
		src, key, value string
		wantErr         bool
	}{
		{src: "a=b", key: "a", value: "b"},
		{src: "a=", key: "a", value: ""},
		{src: "a=b=c", key: "a", value: "b=c"},
		{src: "a.b_c-d=x y", key: "a.b_c-d", value: "x y"},
		{src: "=b", wantErr: true},
		{src: "ab", wantErr: true},
		{src: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			key, value, err := ParseLiteral(tt.src)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if key != tt.key || value != tt.value {
				t.Errorf("got %q=%q, want %q=%q", key, value, tt.key, tt.value)
			}
		})
	}
}

func TestParseFileSource(t *testing.T) {
	tests := []struct {
		src, key, path string
		wantErr        bool
	}{
		{src: "conf/app.yaml", key: "app.yaml", path: "conf/app.yaml"},
		{src: "conf/", key: "conf", path: "conf/"},
		{src: "k=conf/app.yaml", key: "k", path: "conf/app.yaml"},
		{src: "=conf/app.yaml", wantErr: true},
		{src: "k=", wantErr: true},
		{src: "a=b=c", wantErr: true},
		{src: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			key, path, err := ParseFileSource(tt.src)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if key != tt.key || path != tt.path {
				t.Errorf("got key %q path %q, want %q %q", key, path, tt.key, tt.path)
			}
		})
	}
}

func TestParseEnvFile(t *testing.T) {
	env := map[string]string{"FROM_ENV": "env-value"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		in      string
		want    [][2]string
		wantErr string
	}{
		{name: "pairs", in: "A=1\nB=two words\n", want: [][2]string{{"A", "1"}, {"B", "two words"}}},
		{name: "comments and blanks", in: "# c\n\n   \n  # indented\nA=1", want: [][2]string{{"A", "1"}}},
		{name: "leading space trimmed, value verbatim", in: "  A= \"q\" ", want: [][2]string{{"A", ` "q" `}}},
		{name: "value from environment", in: "FROM_ENV\nUNSET\n", want: [][2]string{{"FROM_ENV", "env-value"}, {"UNSET", ""}}},
		{name: "empty value", in: "A=\n", want: [][2]string{{"A", ""}}},
		{name: "byte order mark", in: "\xef\xbb\xbfA=1\n", want: [][2]string{{"A", "1"}}},
		{name: "CRLF line ends", in: "A=1\r\nB=2\r\n", want: [][2]string{{"A", "1"}, {"B", "2"}}},
		{name: "invalid key", in: "A=1\n1A=2\n", wantErr: "line 2"},
		{name: "invalid utf8", in: "A=\xff\n", wantErr: "line 1: invalid UTF-8"},
		{name: "empty key", in: "=x\n", wantErr: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][2]string
			err := ParseEnvFile(strings.NewReader(tt.in), getenv, func(k, v string) error {
				got = append(got, [2]string{k, v})
				return nil
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSourcesLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	text := write("text.txt", []byte("hello\n"))
	bin := write("blob.bin", []byte{0xff, 0x00, 0xfe})
	write("d/one", []byte("1"))
	write("d/two", []byte("2"))
	write("d/sub/ignored", []byte("x"))
	if err := os.Symlink(text, filepath.Join(dir, "d", "link")); err != nil {
		t.Fatal(err)
	}
	envFile := write("run.env", []byte("# comment\nE1=v1\nE2\n"))
	// Exactly the limit, and one byte over it spread across data and
	// binaryData.
	half := write("half", bytes.Repeat([]byte("a"), MaxConfigMapSize/2))
	halfBin := write("half.bin", append([]byte{0xff}, bytes.Repeat([]byte{0}, MaxConfigMapSize/2-1)...))
	getenv := func(k string) string { return map[string]string{"E2": "from-env"}[k] }

	tests := []struct {
		name       string
		src        Sources
		wantData   map[string]string
		wantBinary map[string][]byte
		wantErr    string
	}{
		{
			name:     "all kinds",
			src:      Sources{Literals: []string{"lit=a=b"}, Files: []string{text, "renamed=" + text, bin, filepath.Join(dir, "d")}, EnvFiles: []string{envFile}},
			wantData: map[string]string{"lit": "a=b", "text.txt": "hello\n", "renamed": "hello\n", "one": "1", "two": "2", "E1": "v1", "E2": "from-env"},
			// The symlink and the subdirectory are skipped, as kubectl does.
			wantBinary: map[string][]byte{"blob.bin": {0xff, 0x00, 0xfe}},
		},
		{name: "empty", src: Sources{}, wantData: map[string]string{}, wantBinary: map[string][]byte{}},
		{name: "duplicate literal", src: Sources{Literals: []string{"a=1", "a=2"}}, wantErr: `duplicate ConfigMap key "a"`},
		{name: "duplicate across data and binary", src: Sources{Files: []string{"k=" + bin, "k=" + text}}, wantErr: `duplicate ConfigMap key "k"`},
		{name: "invalid key", src: Sources{Literals: []string{"a b=1"}}, wantErr: "not a valid ConfigMap key"},
		{name: "key for directory", src: Sources{Files: []string{"k=" + filepath.Join(dir, "d")}}, wantErr: "cannot give a key name for a directory"},
		{name: "missing file", src: Sources{Files: []string{filepath.Join(dir, "nope")}}, wantErr: "no such file"},
		{name: "env file is a directory", src: Sources{EnvFiles: []string{dir}}, wantErr: "is a directory"},
		{name: "exactly 1 MiB of values", src: Sources{Files: []string{half, halfBin}},
			wantData:   map[string]string{"half": strings.Repeat("a", MaxConfigMapSize/2)},
			wantBinary: map[string][]byte{"half.bin": append([]byte{0xff}, bytes.Repeat([]byte{0}, MaxConfigMapSize/2-1)...)}},
		{name: "over 1 MiB", src: Sources{Files: []string{half, halfBin}, Literals: []string{"x=1"}}, wantErr: "the ConfigMap's data is 1048577 bytes, more than the API server accepts (1048576, 1 MiB)"},
		{name: "missing env file", src: Sources{EnvFiles: []string{filepath.Join(dir, "nope.env")}}, wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.src.Load(getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.Data, tt.wantData) {
				t.Errorf("data = %q, want %q", d.Data, tt.wantData)
			}
			if !reflect.DeepEqual(d.Binary, tt.wantBinary) {
				t.Errorf("binary = %q, want %q", d.Binary, tt.wantBinary)
			}
		})
	}
}

// FuzzParseEnvFile checks that whatever the input, every pair handed out has
// a valid environment variable name and a UTF-8 value without a newline, and
// that the parser never panics.
func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"A=1\nB=2", "# c\n\nX", "\xef\xbb\xbfA=b=c", "A=\xff", " \t A=1\r\n", "=", "A"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_ = ParseEnvFile(bytes.NewReader(in), func(string) string { return "env" }, func(k, v string) error {
			if errs := validation.IsEnvVarName(k); len(errs) > 0 {
				t.Fatalf("invalid key %q accepted: %v", k, errs)
			}
			if !utf8.ValidString(v) || strings.Contains(v, "\n") {
				t.Fatalf("bad value %q for %q", v, k)
			}
			return nil
		})
	})
}

// FuzzParseSources checks the literal and file source parsers: no panic, and
// a successful parse gives back a non-empty key and what was split off.
func FuzzParseSources(f *testing.F) {
	for _, s := range []string{"a=b", "=b", "a=", "a=b=c", "dir/", "", "k=dir/f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if k, v, err := ParseLiteral(src); err == nil {
			if k == "" || k+"="+v != src {
				t.Fatalf("ParseLiteral(%q) = %q, %q", src, k, v)
			}
		}
		if k, p, err := ParseFileSource(src); err == nil {
			if k == "" || p == "" || strings.Count(p, "=") > 0 {
				t.Fatalf("ParseFileSource(%q) = %q, %q", src, k, p)
			}
			if strings.Contains(src, "=") && k+"="+p != src {
				t.Fatalf("ParseFileSource(%q) = %q, %q", src, k, p)
			}
		}
	})
}
