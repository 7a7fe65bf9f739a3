package cleanup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveFiles(t *testing.T) {
	host := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	mustWrite(t, secret)
	mustWrite(t, filepath.Join(host, "etc/cni/net.d/00-multus.conf"))
	mustWrite(t, filepath.Join(host, "opt/cni/bin/multus"))
	mustWrite(t, filepath.Join(host, "cache/a.json"))
	mustWrite(t, filepath.Join(host, "cache/b.json"))
	mustWrite(t, filepath.Join(host, "cache/keep.txt"))
	mustWrite(t, filepath.Join(host, "full/file"))
	if err := os.MkdirAll(filepath.Join(host, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A symlink in the last component is removed, not followed.
	mustSymlink(t, secret, filepath.Join(host, "link-to-secret"))
	// An intermediate symlink out of the root is refused.
	mustSymlink(t, outside, filepath.Join(host, "escape"))
	// So is a relative one that climbs out.
	mustSymlink(t, "../../"+filepath.Base(outside), filepath.Join(host, "etc/climb"))

	paths := []string{
		filepath.Join(host, "etc/cni/net.d/00-multus.conf"),
		filepath.Join(host, "opt/cni/bin/multus"),
		filepath.Join(host, "cache/*.json"),
		filepath.Join(host, "full"),
		filepath.Join(host, "empty"),
		filepath.Join(host, "missing"),
		filepath.Join(host, "nomatch/*"),
		filepath.Join(host, "link-to-secret"),
		filepath.Join(host, "escape/secret"),
		filepath.Join(host, "etc/climb/secret"),
	}
	sum := &Summary{}
	if err := RemoveFiles(context.Background(), paths, FileOptions{AllowedRoots: []string{host}, Globs: true}, sum); err != nil {
		t.Fatalf("RemoveFiles: %v", err)
	}
	want := map[string]Outcome{
		filepath.Join(host, "etc/cni/net.d/00-multus.conf"): Deleted,
		filepath.Join(host, "opt/cni/bin/multus"):           Deleted,
		filepath.Join(host, "cache/a.json"):                 Deleted,
		filepath.Join(host, "cache/b.json"):                 Deleted,
		filepath.Join(host, "full"):                         Skipped,
		filepath.Join(host, "empty"):                        Deleted,
		filepath.Join(host, "missing"):                      Skipped,
		filepath.Join(host, "nomatch/*"):                    Skipped,
		filepath.Join(host, "link-to-secret"):               Deleted,
		filepath.Join(host, "escape/secret"):                Failed,
		filepath.Join(host, "etc/climb/secret"):             Failed,
	}
	got := map[string]Outcome{}
	for _, r := range sum.Records() {
		got[r.Object] = r.Outcome
		t.Logf("%s %s %s", r.Outcome, r.Object, r.Reason)
	}
	for p, o := range want {
		if got[p] != o {
			t.Errorf("%s: outcome %q, want %q", p, got[p], o)
		}
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("the symlink target outside the root was touched: %v", err)
	}
	for _, p := range []string{"cache/keep.txt", "full/file"} {
		if _, err := os.Stat(filepath.Join(host, p)); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(host, "link-to-secret")); !os.IsNotExist(err) {
		t.Errorf("symlink still there: %v", err)
	}
}

// TestRemoveFilesLiteral: without Globs a pattern names one file, as in
// spectro-cleanup, where "/host/opt/cni/bin/*" was a harmless not-found.
func TestRemoveFilesLiteral(t *testing.T) {
	host := t.TempDir()
	for _, f := range []string{"opt/cni/bin/bridge", "opt/cni/bin/multus", "etc/a[1].conf", "etc/a1.conf"} {
		mustWrite(t, filepath.Join(host, f))
	}
	sum := &Summary{}
	paths := []string{filepath.Join(host, "opt/cni/bin/*"), filepath.Join(host, "etc/a[1].conf")}
	if err := RemoveFiles(context.Background(), paths, FileOptions{AllowedRoots: []string{host}}, sum); err != nil {
		t.Fatalf("RemoveFiles: %v", err)
	}
	got := map[string]Outcome{}
	for _, r := range sum.Records() {
		got[r.Object] = r.Outcome
	}
	if got[paths[0]] != Skipped || got[paths[1]] != Deleted || len(got) != 2 {
		t.Errorf("outcomes %v, want %s skipped and %s deleted", got, paths[0], paths[1])
	}
	for _, f := range []string{"opt/cni/bin/bridge", "opt/cni/bin/multus", "etc/a1.conf"} {
		if _, err := os.Stat(filepath.Join(host, f)); err != nil {
			t.Errorf("%s removed by a literal path: %v", f, err)
		}
	}
}

func TestRemoveFilesRefusesOutOfRoot(t *testing.T) {
	host := t.TempDir()
	victim := filepath.Join(host, "victim")
	mustWrite(t, victim)
	sum := &Summary{}
	err := RemoveFiles(context.Background(), []string{victim, "/etc/passwd"}, FileOptions{AllowedRoots: []string{host}}, sum)
	if err == nil {
		t.Fatal("an out-of-root path was accepted")
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a file was removed although the config was refused: %v", err)
	}
	if n := len(sum.Records()); n != 0 {
		t.Fatalf("%d records, want none", n)
	}
}

func TestRemoveFilesDryRun(t *testing.T) {
	host := t.TempDir()
	f := filepath.Join(host, "x")
	mustWrite(t, f)
	sum := &Summary{}
	if err := RemoveFiles(context.Background(), []string{f}, FileOptions{AllowedRoots: []string{host}, DryRun: true}, sum); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); err != nil {
		t.Fatalf("dry run removed %s", f)
	}
	if sum.Count(PhaseFile, WouldDelete) != 1 {
		t.Fatalf("records %+v, want one would-delete", sum.Records())
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
