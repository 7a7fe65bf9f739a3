package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/prune"
)

// outputNow is the clock of the goldens' ages.
func outputNow() time.Time { return time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC) }

const (
	sandboxA = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708"
	sandboxB = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
	sandboxC = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
)

// outputFiles are the files of the goldens' run, in the order a run
// might report them (not sorted).
func outputFiles(dryRun bool) []prune.File {
	ago := func(d time.Duration) time.Time { return outputNow().Add(-d) }
	files := []prune.File{
		{Phase: prune.PhaseScratch, Name: sandboxA, Sandbox: sandboxA, ModTime: ago(3*time.Hour + 12*time.Minute), Remove: true, Reason: prune.ReasonOrphanScratch},
		{Phase: prune.PhaseResults, Name: "macvlan-conf-" + sandboxA + "-net1", Sandbox: sandboxA,
			Pod:     prune.PodRef{Namespace: "team", Name: "web-0", UID: "8d9a6c1e-7f4b-4b7e-9d51-3c2f0e6a1b2c"},
			ModTime: ago(3*time.Hour + 12*time.Minute), Remove: true, Reason: prune.ReasonPodGone},
		{Phase: prune.PhaseResults, Name: "bridge-" + sandboxB + "-net1", Sandbox: sandboxB,
			Pod:     prune.PodRef{Namespace: "default", Name: "cron-29012345-x7k2p", UID: "1b2c3d4e-5f60-4718-9293-a4b5c6d7e8f9"},
			ModTime: ago(15 * 24 * time.Hour), Remove: true, Reason: prune.ReasonEarlierBoot},
		{Phase: prune.PhaseResults, Name: "bridge-" + sandboxC + "-net1", Sandbox: sandboxC,
			Pod:     prune.PodRef{Namespace: "default", Name: "live", UID: "5e6f7081-92a3-4b4c-8d6e-7f8091a2b3c4"},
			ModTime: ago(45 * time.Minute), Reason: prune.ReasonPodLive},
		{Phase: prune.PhaseResults, Name: "bridge-" + sandboxC + "-net2", Sandbox: sandboxC,
			ModTime: ago(40 * time.Second), Reason: prune.ReasonUnparseable},
		{Phase: prune.PhaseScratch, Name: sandboxC, Sandbox: sandboxC, ModTime: ago(45 * time.Minute), Reason: prune.ReasonSandboxReferenced},
		{Phase: prune.PhaseOther, Name: "notes.txt", Reason: prune.ReasonOtherName},
	}
	for i := range files {
		files[i].DryRun = dryRun
	}
	return files
}

// outputSummary is the summary of outputFiles.
func outputSummary(dryRun bool) *prune.Summary {
	return &prune.Summary{
		Dir:    "/var/lib/cni/multus",
		DryRun: dryRun,
		FileCounts: prune.FileCounts{
			Scanned:   map[prune.Phase]int{prune.PhaseResults: 4, prune.PhaseScratch: 2, prune.PhaseOther: 1},
			Removed:   map[prune.Phase]int{prune.PhaseResults: 2, prune.PhaseScratch: 1},
			RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 1, prune.ReasonEarlierBoot: 1, prune.ReasonOrphanScratch: 1},
			Kept: map[prune.Reason]int{prune.ReasonPodLive: 1, prune.ReasonUnparseable: 1, prune.ReasonSandboxReferenced: 1,
				prune.ReasonOtherName: 1},
			Vanished: map[prune.Phase]int{},
		},
		Duration: 1234 * time.Millisecond,
	}
}

// reservationFiles are host-local reservations of a run with
// --release-host-local-dir, after outputFiles.
func reservationFiles(dryRun bool) []prune.File {
	ago := func(d time.Duration) time.Time { return outputNow().Add(-d) }
	files := append(outputFiles(dryRun),
		prune.File{Phase: prune.PhaseReservation, Name: "/var/lib/cni/networks/macvlan-conf/10.20.0.7", Sandbox: sandboxB,
			ModTime: ago(15 * 24 * time.Hour), Remove: true, Reason: prune.ReasonOrphanedReservation},
		prune.File{Phase: prune.PhaseReservation, Name: "/var/lib/cni/networks/macvlan-conf/10.20.0.8", Sandbox: sandboxC,
			ModTime: ago(45 * time.Minute), Reason: prune.ReasonSandboxLive},
		prune.File{Phase: prune.PhaseReservation, Name: "/var/lib/cni/networks/macvlan-conf/10.20.0.9", Sandbox: sandboxA,
			ModTime: ago(3 * time.Hour), Reason: prune.ReasonCacheNamed},
	)
	for i := range files {
		files[i].DryRun = dryRun
	}
	return files
}

// reservationSummary is the summary of reservationFiles.
func reservationSummary(dryRun bool) *prune.Summary {
	s := outputSummary(dryRun)
	s.Reservations = &prune.ReservationCounts{Dirs: []string{"/var/lib/cni/networks"}, Networks: []string{"net1"}, Scanned: 3, Released: 1,
		Kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1}}
	return s
}

// TestOutputGolden prints a run in every format and compares it with
// testdata/output-<name>.golden (issue 26). SWEEP_UPDATE_GOLDEN=1 rewrites
// the files, as for TestGolden.
func TestOutputGolden(t *testing.T) {
	noView := errors.New("no complete, fresh view of the node's pods: list pods: connection refused")
	unsettled := outputSummary(true)
	unsettled.RemovedBy, unsettled.Removed = map[prune.Reason]int{}, map[prune.Phase]int{}
	unsettled.Kept = map[prune.Reason]int{prune.ReasonClockUnsettled: 5, prune.ReasonOtherName: 1}
	unsettled.AgesTrustedFrom = time.Date(2026, 3, 1, 14, 32, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		format string
		dryRun bool
		files  []prune.File
		sum    *prune.Summary
		err    error
	}{
		{name: "table", format: outputTable, dryRun: true, files: outputFiles(true), sum: outputSummary(true)},
		{name: "table-empty", format: outputTable, dryRun: true, files: outputFiles(true)[3:], sum: unsettled},
		{name: "wide", format: outputWide, files: outputFiles(false), sum: outputSummary(false)},
		{name: "text", format: outputText, files: outputFiles(false), sum: outputSummary(false)},
		{name: "text-stopped", format: outputText, files: outputFiles(false), sum: outputSummary(false), err: prune.ErrNotSynced},
		{name: "json", format: outputJSON, dryRun: true, files: outputFiles(true), sum: outputSummary(true)},
		{name: "yaml", format: outputYAML, dryRun: true, files: outputFiles(true), sum: outputSummary(true)},
		{name: "json-stopped", format: outputJSON, files: outputFiles(false)[:2], sum: outputSummary(false), err: prune.ErrNotSynced},
		{name: "json-no-view", format: outputJSON, dryRun: true, err: noView},
		{name: "yaml-no-view", format: outputYAML, dryRun: true, err: noView},
		{name: "table-no-view", format: outputTable, dryRun: true, err: noView},
		{name: "table-reservations", format: outputTable, dryRun: true, files: reservationFiles(true), sum: reservationSummary(true)},
		{name: "wide-reservations", format: outputWide, files: reservationFiles(false), sum: reservationSummary(false)},
		{name: "json-reservations", format: outputJSON, files: reservationFiles(false), sum: reservationSummary(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := newPrinter(&buf, tc.format, "/var/lib/cni/multus", tc.dryRun, outputNow)
			for _, f := range tc.files {
				p.file(f)
			}
			if err := p.finish(tc.sum, tc.err); err != nil {
				t.Fatal(err)
			}
			got := buf.Bytes()
			switch tc.format {
			case outputJSON:
				checkRunObject(t, got, json.Unmarshal, tc.files, tc.err)
			case outputYAML:
				checkRunObject(t, got, func(b []byte, v any) error { return yaml.Unmarshal(b, v) }, tc.files, tc.err)
			}
			golden := filepath.Join("testdata", "output-"+tc.name+".golden")
			if os.Getenv("SWEEP_UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (SWEEP_UPDATE_GOLDEN=1 writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs; SWEEP_UPDATE_GOLDEN=1 rewrites it.\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}

// checkRunObject checks what a consumer of JSON or YAML relies on: one
// object, with every file, whether the run completed and why not.
func checkRunObject(t *testing.T, data []byte, unmarshal func([]byte, any) error, files []prune.File, runErr error) {
	t.Helper()
	var obj struct {
		Files []struct {
			File   string `json:"file"`
			Action string `json:"action"`
		} `json:"files"`
		Completed *bool   `json:"completed"`
		Error     *string `json:"error"`
		Dir       string  `json:"dir"`
	}
	if err := unmarshal(data, &obj); err != nil {
		t.Fatalf("not one object: %v\n%s", err, data)
	}
	if len(obj.Files) != len(files) || obj.Files == nil {
		t.Errorf("%d files (nil: %v), want %d", len(obj.Files), obj.Files == nil, len(files))
	}
	if obj.Completed == nil || *obj.Completed != (runErr == nil) {
		t.Errorf("completed = %v, want %v", obj.Completed, runErr == nil)
	}
	switch {
	case runErr == nil && obj.Error != nil:
		t.Errorf("error = %q, want null", *obj.Error)
	case runErr != nil && (obj.Error == nil || *obj.Error != runErr.Error()):
		t.Errorf("error = %v, want %q", obj.Error, runErr)
	}
	if obj.Dir != "/var/lib/cni/multus" {
		t.Errorf("dir = %q", obj.Dir)
	}
}

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		in     string
		dryRun bool
		want   string
		err    bool
	}{
		{"", true, outputTable, false},
		{"", false, outputText, false},
		{"text", true, outputText, false},
		{"wide", false, outputWide, false},
		{"table", false, outputTable, false},
		{"json", false, outputJSON, false},
		{"yaml", true, outputYAML, false},
		{"xml", false, "", true},
		{"JSON", false, "", true},
	} {
		got, err := parseOutput(tc.in, tc.dryRun)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("parseOutput(%q, %v) = %q, %v; want %q, error %v", tc.in, tc.dryRun, got, err, tc.want, tc.err)
		}
	}
}

// TestPruneOutputFailed runs sweepd prune to a failure before any view:
// JSON still prints one object that says the run did not complete and why,
// and the text formats print no summary that would read as all well.
func TestPruneOutputFailed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		output string
		stdout string // "" for nothing
	}{
		{"json", `"completed": false`},
		{"yaml", "completed: false"},
		{"text", ""},
		{"table", ""},
	} {
		t.Run(tc.output, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"prune", "--node-name=n", "--multus-dir=" + missing, "--output=" + tc.output}, &stdout, &stderr)
			if code != exitFail {
				t.Errorf("exit %d, want %d", code, exitFail)
			}
			if !strings.Contains(stderr.String(), "nothing deleted") {
				t.Errorf("stderr %q does not say nothing was deleted", stderr.String())
			}
			if tc.stdout == "" {
				if stdout.Len() != 0 {
					t.Errorf("stdout %q, want nothing", stdout.String())
				}
				return
			}
			if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stdout.String(), missing) {
				t.Errorf("stdout %q, want %q and the error", stdout.String(), tc.stdout)
			}
		})
	}
}

// TestOutputYAMLQuoting checks that names a YAML reader would take for
// another type (a number, a boolean, null, a key) read back as the strings
// they are: file names and the pods in cache files are anyone's.
func TestOutputYAMLQuoting(t *testing.T) {
	names := []string{"123", "on", "null", "a: b", "- x", "#c", "\"q\"", "line\nbreak", "1e3", "0x1F", "~"}
	var buf bytes.Buffer
	p := newPrinter(&buf, outputYAML, "/var/lib/cni/multus", true, outputNow)
	for _, n := range names {
		p.file(prune.File{Phase: prune.PhaseOther, Name: n, Pod: prune.PodRef{Namespace: n, Name: n, UID: n}, Reason: prune.ReasonOtherName})
	}
	if err := p.finish(outputSummary(true), nil); err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Files []struct {
			File string `json:"file"`
			Pod  struct {
				Namespace, Name, UID string
			} `json:"pod"`
		} `json:"files"`
	}
	if err := yaml.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatalf("%v\n%s", err, buf.Bytes())
	}
	if len(obj.Files) != len(names) {
		t.Fatalf("%d files, want %d", len(obj.Files), len(names))
	}
	for i, f := range obj.Files {
		if f.File != names[i] || f.Pod.Namespace != names[i] || f.Pod.Name != names[i] || f.Pod.UID != names[i] {
			t.Errorf("file %d read back as %+v, want %q", i, f, names[i])
		}
	}
}

// inRunOrder returns files as a run reports them: the results files, then
// the scratch files (phase 2), then the reservations, each in the multus
// directory /var/lib/cni/multus.
func inRunOrder(files []prune.File) []prune.File {
	order := map[prune.Phase]int{prune.PhaseResults: 0, prune.PhaseOther: 0, prune.PhaseScratch: 1, prune.PhaseReservation: 2}
	out := slices.Clone(files)
	slices.SortStableFunc(out, func(a, b prune.File) int { return order[a.Phase] - order[b.Phase] })
	for i := range out {
		out[i].CacheDir = "/var/lib/cni/multus"
	}
	return out
}

// TestOutputFilter: --pod, --uid, --reason and --file list only the files
// they match, all of them at once, in every format; a pod's scratch files
// and reservations by the sandboxes of its results files; a table they
// leave empty says so on stderr (issue 44, part 4).
func TestOutputFilter(t *testing.T) {
	const (
		webResults  = "results/macvlan-conf-" + sandboxA + "-net1"
		liveResults = "results/bridge-" + sandboxC + "-net1"
		liveBroken  = "results/bridge-" + sandboxC + "-net2"
		cronResults = "results/bridge-" + sandboxB + "-net1"
	)
	for _, tc := range []struct {
		name   string
		format string
		filter fileFilter
		want   []string // the files listed, in the order printed
		stderr string
	}{
		{name: "pod by namespace and name", format: outputWide, filter: fileFilter{pod: "team/web-0"},
			want: []string{webResults, sandboxA, "/var/lib/cni/networks/macvlan-conf/10.20.0.9"}},
		{name: "pod by name in any namespace", format: outputWide, filter: fileFilter{pod: "web-0"},
			want: []string{webResults, sandboxA, "/var/lib/cni/networks/macvlan-conf/10.20.0.9"}},
		{name: "pod in another namespace", format: outputWide, filter: fileFilter{pod: "other/web-0"},
			stderr: "No files match --pod=other/web-0.\n"},
		// The live pod's unparseable file names no pod, but its sandbox.
		{name: "uid of a live pod", format: outputWide, filter: fileFilter{uid: "5E6F7081-92a3-4b4c-8d6e-7f8091a2b3c4"},
			want: []string{liveResults, liveBroken, sandboxC, "/var/lib/cni/networks/macvlan-conf/10.20.0.8"}},
		{name: "uid and pod must agree", format: outputWide, filter: fileFilter{uid: "5e6f7081-92a3-4b4c-8d6e-7f8091a2b3c4", pod: "team/web-0"},
			stderr: "No files match --pod=team/web-0 --uid=5e6f7081-92a3-4b4c-8d6e-7f8091a2b3c4.\n"},
		{name: "reasons", format: outputWide, filter: fileFilter{reasons: []string{"pod-live", "sandbox-referenced"}},
			want: []string{liveResults, sandboxC}},
		{name: "pod and reason", format: outputWide, filter: fileFilter{pod: "default/live", reasons: []string{"sandbox-live"}},
			want: []string{"/var/lib/cni/networks/macvlan-conf/10.20.0.8"}},
		{name: "file pattern on the FILE column", format: outputWide, filter: fileFilter{file: "results/bridge-*"},
			want: []string{cronResults, liveResults, liveBroken}},
		{name: "file by full path", format: outputWide, filter: fileFilter{file: "/var/lib/cni/multus/notes.txt"}, want: []string{"notes.txt"}},
		{name: "file by name", format: outputWide, filter: fileFilter{file: "*-" + sandboxB + "-*"},
			want: []string{cronResults}},
		{name: "reservation by its path", format: outputWide, filter: fileFilter{file: "/var/lib/cni/networks/*/10.20.0.7"},
			want: []string{"/var/lib/cni/networks/macvlan-conf/10.20.0.7"}},
		{name: "table: the pod's files to remove", format: outputTable, filter: fileFilter{pod: "team/web-0"},
			want: []string{webResults, sandboxA}},
		{name: "table: a live pod's files are none to remove", format: outputTable, filter: fileFilter{pod: "default/live"},
			stderr: "No files to remove match --pod=default/live.\n"},
		{name: "json", format: outputJSON, filter: fileFilter{reasons: []string{"orphaned-reservation", "earlier-boot"}},
			want: []string{cronResults, "/var/lib/cni/networks/macvlan-conf/10.20.0.7"}},
		{name: "json, nothing matches", format: outputJSON, filter: fileFilter{reasons: []string{"too-young"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			p := newPrinter(&stdout, tc.format, "/var/lib/cni/multus", true, outputNow)
			f := tc.filter
			f.sandboxes = map[string]bool{}
			p.filter, p.errOut = &f, &stderr
			for _, file := range inRunOrder(reservationFiles(true)) {
				p.file(file)
			}
			if err := p.finish(reservationSummary(true), nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			if tc.format == outputJSON {
				var obj struct {
					Files []struct{ File string } `json:"files"`
				}
				if err := json.Unmarshal(stdout.Bytes(), &obj); err != nil {
					t.Fatalf("%v\n%s", err, &stdout)
				}
				for _, r := range obj.Files {
					got = append(got, r.File)
				}
				slices.Sort(got)
				slices.Sort(tc.want)
			} else {
				if strings.HasPrefix(stdout.String(), "FILE ") {
					table, _, _ := strings.Cut(stdout.String(), "\n\n")
					for _, line := range strings.Split(table, "\n")[1:] {
						got = append(got, strings.Fields(line)[0])
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %q, want %q\n%s", got, tc.want, &stdout)
			}
			if stderr.String() != tc.stderr {
				t.Errorf("stderr %q, want %q", &stderr, tc.stderr)
			}
			// The summary is the whole run's, whatever is listed.
			if tc.format != outputJSON && !strings.Contains(stdout.String(), "scanned 4 results, 2 scratch, 1 other") {
				t.Errorf("no summary of the whole run:\n%s", &stdout)
			}
		})
	}
}

// TestOutputLimit: a table cut at --limit says how many files it left out
// and which flag lists them all (issue 44, part 4).
func TestOutputLimit(t *testing.T) {
	const cut = "... and %d more files, not listed (--limit=%d): --limit=0 lists them all; -o json or -o yaml streams every file in less memory\n"
	for _, tc := range []struct {
		name   string
		format string
		limit  int
		filter *fileFilter
		rows   int
		more   int // files said to be left out; 0: no such line
	}{
		{name: "table under the limit", format: outputTable, limit: 3, rows: 3},
		{name: "table over the limit", format: outputTable, limit: 2, rows: 2, more: 1},
		{name: "wide over the limit", format: outputWide, limit: 2, rows: 2, more: 5},
		{name: "no limit", format: outputWide, limit: 0, rows: 7},
		{name: "the default limit", format: outputWide, limit: defaultTableLimit, rows: 7},
		{name: "filtered, counted among the matches", format: outputWide, limit: 1, filter: &fileFilter{file: "results/*"}, rows: 1, more: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			p := newPrinter(&stdout, tc.format, "/var/lib/cni/multus", true, outputNow)
			p.limit = tc.limit
			if tc.filter != nil {
				tc.filter.sandboxes = map[string]bool{}
				p.filter, p.errOut = tc.filter, io.Discard
			}
			for _, f := range inRunOrder(outputFiles(true)) {
				p.file(f)
			}
			if err := p.finish(outputSummary(true), nil); err != nil {
				t.Fatal(err)
			}
			table, _, _ := strings.Cut(stdout.String(), "\n\n")
			lines := strings.Split(table+"\n", "\n")
			rows := len(lines) - 2 // the header, and the empty string after the last newline
			wantMore := ""
			if tc.more > 0 {
				wantMore = fmt.Sprintf(cut, tc.more, tc.limit)
				rows--
			}
			if rows != tc.rows {
				t.Errorf("%d rows, want %d:\n%s", rows, tc.rows, &stdout)
			}
			if gotMore := strings.Contains(stdout.String(), "more files, not listed"); gotMore != (tc.more > 0) || !strings.Contains(stdout.String(), wantMore) {
				t.Errorf("want the line %q:\n%s", wantMore, &stdout)
			}
		})
	}
}
