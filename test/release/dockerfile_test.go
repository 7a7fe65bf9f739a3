package release

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// dockerfile is the part of ../Dockerfile this test relies on.
type dockerfile struct {
	buildRuns  []string // shell commands of the build stage's RUN lines
	finalFrom  string
	entrypoint string
	copies     []string
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines; drop comments.
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s)
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	var d dockerfile
	stage := 0
	mount := regexp.MustCompile(`^--mount=\S+\s+`)
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stage++
			d.finalFrom = rest
		case "RUN":
			if stage == 1 {
				for mount.MatchString(rest) {
					rest = mount.ReplaceAllString(rest, "")
				}
				d.buildRuns = append(d.buildRuns, rest)
			}
		case "ENTRYPOINT":
			d.entrypoint = rest
		case "COPY":
			if stage == 2 {
				d.copies = append(d.copies, rest)
			}
		}
	}
	if stage != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (build, distroless)", stage)
	}
	return d
}

// ignored reports whether rel (slash-separated, relative to the context) is
// left out by a .dockerignore pattern. It knows the forms our .dockerignore
// uses: a path from the root, and **/ followed by a base-name pattern.
func ignored(patterns []string, rel string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutPrefix(p, "**/"); ok {
			if m, _ := path.Match(base, path.Base(rel)); m {
				return true
			}
			continue
		}
		if m, _ := path.Match(p, rel); m || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// buildContext copies the module as docker would send it, after
// .dockerignore, into a temporary directory.
func buildContext(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore: exceptions (%s) are not understood by this test", l)
			}
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	ctx := t.TempDir()
	err = filepath.WalkDir("../..", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if rel == "." {
			return nil
		}
		if ignored(patterns, filepath.ToSlash(rel)) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctx, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestDockerfileBuild runs the build stage's commands the way the Dockerfile
// does (no Docker engine here), on the context .dockerignore leaves, and
// checks the result: a static, trimmed binary, and /cleanup behaving as
// `sweepd cleanup`. Not verified here: the golang and distroless base
// images, BuildKit's cache mounts, and that COPY keeps the /cleanup symlink.
func TestDockerfileBuild(t *testing.T) {
	d := parseDockerfile(t)
	if !strings.HasPrefix(d.finalFrom, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static*", d.finalFrom)
	}
	// spectro-cleanup's manifests give args without a command, or
	// neither: the entry point must be its /cleanup.
	if d.entrypoint != `["/cleanup"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/cleanup\"]", d.entrypoint)
	}
	if len(d.copies) != 1 || d.copies[0] != "--from=build /out/ /" {
		t.Errorf("final stage COPY %q, want the build's /out/ to /", d.copies)
	}
	var build string
	for _, r := range d.buildRuns {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-o /out/sweepd ./cmd/sweepd", "ln -s sweepd /out/cleanup"} {
		if !strings.Contains(build, want) {
			t.Errorf("the build's RUN lacks %q: %s", want, build)
		}
	}

	ctx := buildContext(t)
	out := filepath.Join(t.TempDir(), "out")
	const version, revision = "v0.0.0-dockerfile-test", "0123456789abcdef0123456789abcdef01234567"
	for _, r := range d.buildRuns {
		cmd := exec.Command("sh", "-ec", strings.ReplaceAll(r, "/out", out))
		cmd.Dir = ctx
		cmd.Env = append(os.Environ(), "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH, "VERSION="+version, "REVISION="+revision)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", r, err, b)
		}
	}
	sweepd := filepath.Join(out, "sweepd")

	// Static: no program interpreter, no shared libraries.
	f, err := elf.Open(sweepd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v: not static", libs)
	}
	info, err := buildinfo.ReadFile(sweepd)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v: want CGO_ENABLED=0 and -trimpath", settings)
	}
	if st, err := os.Stat(sweepd); err == nil {
		t.Logf("sweepd: %.1f MiB", float64(st.Size())/(1<<20))
	}
	// The revision of sweep_build_info too: the context has no .git.
	if b, err := exec.Command(sweepd, "version").Output(); err != nil || !strings.Contains(string(b), version) || !strings.Contains(string(b), "revision "+revision) {
		t.Errorf("sweepd version = %q, %v; want %s, revision %s", b, err, version, revision)
	}

	// /cleanup is sweepd cleanup: the same help, the same exit status.
	cleanup := filepath.Join(out, "cleanup")
	if target, err := os.Readlink(cleanup); err != nil || target != "sweepd" {
		t.Fatalf("cleanup -> %q, %v; want a symlink to sweepd", target, err)
	}
	var viaLink, viaCmd bytes.Buffer
	c1 := exec.Command(cleanup, "--help")
	c1.Stdout, c1.Stderr = &viaLink, &viaLink
	c2 := exec.Command(sweepd, "cleanup", "--help")
	c2.Stdout, c2.Stderr = &viaCmd, &viaCmd
	if err := c1.Run(); err != nil {
		t.Fatalf("cleanup --help: %v\n%s", err, viaLink.String())
	}
	if err := c2.Run(); err != nil {
		t.Fatalf("sweepd cleanup --help: %v\n%s", err, viaCmd.String())
	}
	if viaLink.String() != viaCmd.String() || !strings.Contains(viaLink.String(), "sweepd cleanup [flags]") {
		t.Errorf("cleanup --help:\n%s\nsweepd cleanup --help:\n%s", viaLink.String(), viaCmd.String())
	}
	// A spectro-cleanup manifest with neither command nor args runs the
	// entry point alone: a cleanup with the defaults, not sweepd's usage.
	// No config is mounted here, so it refuses to clean up nothing, as
	// spectro-cleanup stopped without its resource-config.json.
	bare := exec.Command(cleanup)
	bare.Env = append(os.Environ(), "KUBECONFIG=")
	b, err := bare.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 ||
		!strings.Contains(string(b), "refused") || !strings.Contains(string(b), "/tmp/spectro-cleanup") {
		t.Errorf("cleanup without args: %v, want exit status 2 and a refusal that names /tmp/spectro-cleanup\n%s", err, b)
	}
	// A bad flag: exit 2 either way.
	for _, args := range [][]string{{cleanup, "--no-such-flag"}, {sweepd, "cleanup", "--no-such-flag"}} {
		err := exec.Command(args[0], args[1:]...).Run()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2", args, err)
		}
	}
}
