package prune

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
		ok                  bool
	}{
		{"kernel format", "0b4c7f2e-6a8d-4f4e-9a3b-2f1c5d6e7a8b\n", "0b4c7f2e-6a8d-4f4e-9a3b-2f1c5d6e7a8b", true},
		{"empty", "\n", "", false},
		{"two words", "a b\n", "", false},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadBootID(p)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %q, %v", tc.name, got, err)
		}
	}
	if _, err := ReadBootID(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
	if id, err := ReadBootID(DefaultBootIDFile); err != nil || id == "" {
		t.Logf("this kernel's boot id: %q, %v", id, err) // not every sandbox has /proc
	}
}

func set(ids ...SandboxID) map[SandboxID]struct{} {
	m := map[SandboxID]struct{}{}
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

func TestBootState(t *testing.T) {
	a, b, c := sid(t, liveSandbox), sid(t, failedAdd), sid(t, thickSandbox)
	earlier := func(s *BootState) []SandboxID {
		var out []SandboxID
		for _, id := range []SandboxID{a, b, c} {
			if s.EarlierBoot(id) {
				out = append(out, id)
			}
		}
		return out
	}
	load := func(t *testing.T, dir, boot string) *BootState {
		t.Helper()
		s, err := LoadBootState(dir, boot)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("first run: nothing is earlier", func(t *testing.T) {
		dir := t.TempDir()
		s := load(t, dir, "boot-1")
		if got := earlier(s); len(got) != 0 {
			t.Fatalf("earlier %v", got)
		}
		if err := s.Save(set(a, b)); err != nil {
			t.Fatal(err)
		}
		// Same boot again: still nothing.
		if got := earlier(load(t, dir, "boot-1")); len(got) != 0 {
			t.Fatalf("same boot: earlier %v", got)
		}
	})

	t.Run("after a reboot the recorded sandboxes are earlier", func(t *testing.T) {
		dir := t.TempDir()
		if err := load(t, dir, "boot-1").Save(set(a, b)); err != nil {
			t.Fatal(err)
		}
		s := load(t, dir, "boot-2")
		if got := earlier(s); len(got) != 2 || !s.EarlierBoot(a) || !s.EarlierBoot(b) || s.EarlierBoot(c) {
			t.Fatalf("earlier %v, want a and b", got)
		}
		// The run removed a; b stayed (say the runtime still knew it); c is
		// new in this boot. b stays earlier, c is of this boot.
		if err := s.Save(set(b, c)); err != nil {
			t.Fatal(err)
		}
		if s.EarlierBoot(a) || !s.EarlierBoot(b) || s.EarlierBoot(c) {
			t.Fatalf("in memory after save: earlier %v, want b", earlier(s))
		}
		// A restart in the same boot reads the same.
		s = load(t, dir, "boot-2")
		if s.EarlierBoot(a) || !s.EarlierBoot(b) || s.EarlierBoot(c) {
			t.Fatalf("reloaded: earlier %v, want b", earlier(s))
		}
		// Two reboots without a run in between: b and c are earlier.
		s = load(t, dir, "boot-4")
		if !s.EarlierBoot(b) || !s.EarlierBoot(c) || s.EarlierBoot(a) {
			t.Fatalf("two boots later: earlier %v, want b and c", earlier(s))
		}
	})

	t.Run("a state directory that cannot be written", func(t *testing.T) {
		// A file where the directory should be: fails even for root.
		blocked := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(blocked, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := LoadBootState(filepath.Join(blocked, "state"), "boot-2")
		if err == nil || s == nil || s.Earlier() != 0 {
			t.Fatalf("load: state %v, error %v", s, err)
		}
		if err := s.Save(set(a)); err == nil {
			t.Fatal("save: no error")
		}
	})

	t.Run("corrupt record: nothing is earlier, error reported", func(t *testing.T) {
		for name, content := range map[string]string{
			"truncated":      `{"bootID":"boot-1","sandboxes":["` + liveSandbox,
			"bad id":         `{"bootID":"boot-1","sandboxes":["xyz"],"earlierBoot":[]}`,
			"bad earlier id": `{"bootID":"boot-2","sandboxes":[],"earlierBoot":["` + liveSandbox[:63] + `"]}`,
			"no boot id":     `{"sandboxes":["` + liveSandbox + `"]}`,
			"unknown key":    `{"bootID":"boot-1","sandboxes":[],"earlierBoot":[],"x":1}`,
			"not json":       "\x00\x01",
		} {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, BootRecordFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := LoadBootState(dir, "boot-2")
			if !errors.Is(err, ErrBootRecordCorrupt) {
				t.Errorf("%s: error %v, want ErrBootRecordCorrupt", name, err)
			}
			if s == nil || len(earlier(s)) != 0 {
				t.Errorf("%s: state %v", name, s)
			}
		}
	})

	t.Run("unreadable record: nothing is earlier, error reported", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, BootRecordFile), 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := LoadBootState(dir, "boot-2")
		if err == nil || s == nil || s.Earlier() != 0 {
			t.Fatalf("state %v, error %v", s, err)
		}
	})
}

// FuzzParseBootRecord: a record is all or nothing. Whatever the bytes, the
// parser does not panic; when it accepts them, every earlier-boot sandbox is
// one the record names, and none at all when the record is of the current
// boot and has no earlierBoot list.
func FuzzParseBootRecord(f *testing.F) {
	f.Add([]byte(`{"bootID":"a","sandboxes":["`+liveSandbox+`"],"earlierBoot":["`+failedAdd+`"]}`), "b")
	f.Add([]byte(`{"bootID":"a","sandboxes":["`+liveSandbox+`"],"earlierBoot":[]}`), "a")
	f.Add([]byte(`{"bootID":"a","sandboxes":null}`), "a")
	f.Add([]byte(`{"bootID":"a"} {}`), "b")
	f.Fuzz(func(t *testing.T, data []byte, bootID string) {
		earlier, err := parseBootRecord(data, bootID)
		if err != nil {
			if earlier != nil {
				t.Fatal("a partial result with an error")
			}
			return
		}
		for id := range earlier {
			if !bytes.Contains(data, []byte(id.String())) {
				t.Fatalf("%s is earlier-boot but not in %q", id, data)
			}
		}
	})
}
