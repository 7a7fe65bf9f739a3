package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
