package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/prune"
)

// The formats of `sweepd prune --output`.
const (
	// outputText is the summary alone: counts by phase and reason.
	outputText = "text"
	// outputTable is one row per file removed (in a dry run: that a real
	// run would remove), as kubectl prints a table, then the summary.
	outputTable = "table"
	// outputWide is the table with more columns, and the kept files too.
	outputWide = "wide"
	// outputJSON is one JSON object: every file, the summary, and whether
	// the run completed.
	outputJSON = "json"
	// outputYAML is the same object in YAML.
	outputYAML = "yaml"
)

// outputUsage is the help of --output.
const outputUsage = "output format: table (the files removed, or that a dry run would remove, then the summary), " +
	"wide (every file, kept ones too, with more columns), json, yaml, or text (the summary alone); " +
	"default table for a dry run, text for a real run"

// parseOutput resolves the value of --output. Empty is the default: a dry
// run is asked what it would remove, so it lists the files; a real run,
// which may remove a million files, prints its summary (its log has the
// record of each removal) and keeps its memory flat, unless a listing is
// asked for.
func parseOutput(s string, dryRun bool) (string, error) {
	switch s {
	case "":
		if dryRun {
			return outputTable, nil
		}
		return outputText, nil
	case outputText, outputTable, outputWide, outputJSON, outputYAML:
		return s, nil
	}
	return "", fmt.Errorf("invalid --output %q: want table, wide, json, yaml or text", s)
}

// printer writes what `sweepd prune` prints: its file method is the prune's
// Deps.OnFile, and finish writes the rest once the run is over. The
// tables hold their rows until the end, to align and sort them; JSON and
// YAML write each file as it comes, in the order the run decides them, so
// that a listing of a million files needs no memory for them.
type printer struct {
	w      *bufio.Writer
	format string
	// dir and dryRun say what the run was, for an output without a
	// summary (the run could not start).
	dir    string
	dryRun bool
	// now is the clock of the ages in the tables.
	now func() time.Time
	// rows are the tables' rows, at most limit of them (0: no limit);
	// unlisted counts the files past it.
	rows     []tableRow
	limit    int
	unlisted int
	// filter, when set, chooses the files listed; errOut is where a table
	// that it leaves empty says so, as kubectl's "No resources found".
	filter *fileFilter
	errOut io.Writer
	// n counts the files written by JSON or YAML; err is their first
	// write error, after which nothing more is written.
	n   int
	err error
}

// defaultTableLimit is how many files a table lists by default: enough to
// see what a run does, few enough to read and to hold in a few KiB each.
const defaultTableLimit = 1000

// newPrinter returns a printer of format to w.
func newPrinter(w io.Writer, format, dir string, dryRun bool, now func() time.Time) *printer {
	return &printer{w: bufio.NewWriter(w), format: format, dir: dir, dryRun: dryRun, now: now}
}

// lists reports whether the format lists files, so that the prune must
// report each (Deps.OnFile).
func (p *printer) lists() bool { return p.format != outputText }

// file takes one file's outcome. The prune calls it one file at a time.
func (p *printer) file(f prune.File) {
	if p.filter != nil && !p.filter.match(f) {
		return
	}
	switch p.format {
	case outputTable, outputWide:
		if p.format == outputTable && !f.Remove {
			return
		}
		if p.limit > 0 && len(p.rows) >= p.limit {
			// A table is aligned and sorted at the end, so it is held in
			// memory: bounded, for a node with a backlog of 300,000 files
			// that a dry run in the daemon's container must not OOM.
			p.unlisted++
			return
		}
		p.rows = append(p.rows, newTableRow(f, p.format == outputWide))
	case outputJSON, outputYAML:
		if p.err == nil {
			p.err = p.writeRow(f)
		}
		p.n++
	}
}

// finish writes the output of a run that ended with sum and err (either
// may be nil: no summary when the run could not start). The text formats
// print nothing without a summary: the log on stderr says why; JSON and
// YAML always print one object that says whether the run completed.
func (p *printer) finish(sum *prune.Summary, runErr error) error {
	var err error
	switch p.format {
	case outputJSON, outputYAML:
		err = p.writeEnd(sum, runErr)
	default:
		if sum != nil {
			err = p.writeText(sum, runErr)
		}
	}
	if err != nil {
		return err
	}
	return p.w.Flush()
}

// writeText writes a table, if the format has one and it has rows, then
// the summary.
func (p *printer) writeText(sum *prune.Summary, runErr error) error {
	if len(p.rows) > 0 {
		if err := p.writeTable(); err != nil {
			return err
		}
		if p.unlisted > 0 {
			// How many, and the flag that shows them: a cut listing that
			// says nothing reads as the whole.
			if _, err := fmt.Fprintf(p.w, "... and %d more files, not listed (--limit=%d): --limit=0 lists them all; -o json or -o yaml streams every file in less memory\n",
				p.unlisted, p.limit); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(p.w, "\n"); err != nil {
			return err
		}
	} else if p.filter != nil && p.errOut != nil && (p.format == outputTable || p.format == outputWide) {
		what := "files"
		if p.format == outputTable {
			what = "files to remove"
		}
		fmt.Fprintf(p.errOut, "No %s match %s.\n", what, p.filter)
	}
	return sum.WriteTextResult(p.w, runErr)
}

// tableRow is one row of a table, held until the end: its cells but the
// age, joined by tabs in one string, as little memory per file as a listing
// of a large cache allows (the run itself keeps none).
type tableRow struct {
	cells string
	// mtime is the file's mtime in Unix nanoseconds, 0 when unknown: the
	// age is taken when the table is printed.
	mtime int64
	// order sorts the rows as the run goes: results files, then scratch
	// files, then the rest.
	order int8
}

// The columns of the tables; AGE is inserted at ageColumn.
const (
	tableHeader = "FILE\tPOD\tUID\tREASON"
	wideHeader  = "FILE\tPHASE\tPOD\tUID\tSANDBOX\tACTION\tREASON"
	tableAge    = 3
	wideAge     = 5
)

func newTableRow(f prune.File, wide bool) tableRow {
	r := tableRow{order: 2}
	switch f.Phase {
	case prune.PhaseResults:
		r.order = 0
	case prune.PhaseScratch:
		r.order = 1
	case prune.PhaseReservation:
		r.order = 3
	}
	if !f.ModTime.IsZero() {
		r.mtime = f.ModTime.UnixNano()
	}
	pod, uid := orNone(f.PodName()), orNone(f.Pod.UID)
	if wide {
		r.cells = strings.Join([]string{f.Path(), string(f.Phase), pod, uid, orNone(f.Sandbox), f.Action(), string(f.Reason)}, "\t")
	} else {
		r.cells = strings.Join([]string{f.Path(), pod, uid, string(f.Reason)}, "\t")
	}
	return r
}

// writeTable writes the rows as kubectl prints a table: upper-case headers,
// columns padded to their widest cell and three spaces, <none> for what the
// file does not say, sorted by phase and file.
func (p *printer) writeTable() error {
	slices.SortFunc(p.rows, func(a, b tableRow) int {
		return cmp.Or(cmp.Compare(a.order, b.order), strings.Compare(a.cells, b.cells))
	})
	header, ageAt := tableHeader, tableAge
	if p.format == outputWide {
		header, ageAt = wideHeader, wideAge
	}
	now := p.now()
	// split returns a line's cells with the age in its place: the
	// header's "AGE", a row's age now.
	split := func(cells, age string, dst []string) []string {
		dst = dst[:0]
		for rest, more := cells, true; more; {
			if len(dst) == ageAt {
				dst = append(dst, age)
				continue
			}
			var cell string
			cell, rest, more = strings.Cut(rest, "\t")
			dst = append(dst, cell)
		}
		return dst
	}
	cells := split(header, "AGE", nil)
	widths := make([]int, len(cells))
	measure := func() {
		for i, c := range cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	measure()
	for _, r := range p.rows {
		cells = split(r.cells, r.age(now), cells)
		measure()
	}
	const spaces = "                                "
	write := func() error {
		for i, c := range cells {
			if i > 0 {
				for pad := widths[i-1] - utf8.RuneCountInString(cells[i-1]) + 3; pad > 0; pad -= len(spaces) {
					if _, err := p.w.WriteString(spaces[:min(pad, len(spaces))]); err != nil {
						return err
					}
				}
			}
			if _, err := p.w.WriteString(c); err != nil {
				return err
			}
		}
		_, err := p.w.WriteString("\n")
		return err
	}
	cells = split(header, "AGE", cells)
	if err := write(); err != nil {
		return err
	}
	for _, r := range p.rows {
		cells = split(r.cells, r.age(now), cells)
		if err := write(); err != nil {
			return err
		}
	}
	return nil
}

// age is the row's file's age as kubectl prints an object's (3h12m, 15d),
// or <unknown> when the file was not read.
func (r tableRow) age(now time.Time) string {
	if r.mtime == 0 {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(time.Unix(0, r.mtime)))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// fileRow is one file in JSON and YAML, with the keys of kubectl's JSON.
// YAML rows are encoded by the YAML library itself, not through JSON as
// sigs.k8s.io/yaml does: four times faster, which a listing of a million
// files feels, and the same text.
type fileRow struct {
	File    string  `json:"file" yaml:"file"`
	Phase   string  `json:"phase" yaml:"phase"`
	Action  string  `json:"action" yaml:"action"`
	Reason  string  `json:"reason" yaml:"reason"`
	Pod     *podRow `json:"pod,omitempty" yaml:"pod,omitempty"`
	Sandbox string  `json:"sandbox,omitempty" yaml:"sandbox,omitempty"`
	// ModTime is RFC 3339 in UTC, as kubectl prints timestamps.
	ModTime string `json:"modTime,omitempty" yaml:"modTime,omitempty"`
}

// podRow is the pod a results file names; a field the file lacks is left
// out.
type podRow struct {
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	Name      string `json:"name,omitempty" yaml:"name,omitempty"`
	UID       string `json:"uid,omitempty" yaml:"uid,omitempty"`
}

func newFileRow(f prune.File) fileRow {
	r := fileRow{File: f.Path(), Phase: string(f.Phase), Action: f.Action(), Reason: string(f.Reason), Sandbox: f.Sandbox}
	if f.Pod != (prune.PodRef{}) {
		r.Pod = &podRow{f.Pod.Namespace, f.Pod.Name, f.Pod.UID}
	}
	if !f.ModTime.IsZero() {
		r.ModTime = f.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return r
}

// writeRow writes one file as an element of the object's "files" list,
// opening the list before the first.
func (p *printer) writeRow(f prune.File) error {
	row := newFileRow(f)
	if p.format == outputYAML {
		data, err := yamlv2.Marshal(row)
		if err != nil {
			return err
		}
		if p.n == 0 {
			if _, err := io.WriteString(p.w, "files:\n"); err != nil {
				return err
			}
		}
		// An element of a block sequence: "- " before its first line, two
		// spaces before the others.
		prefix := "- "
		for rest := string(data); rest != ""; prefix = "  " {
			line, after, _ := strings.Cut(rest, "\n")
			if _, err := io.WriteString(p.w, prefix+line+"\n"); err != nil {
				return err
			}
			rest = after
		}
		return nil
	}
	data, err := json.MarshalIndent(row, "    ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n    "
	if p.n == 0 {
		sep = "{\n  \"files\": [\n    "
	}
	if _, err := io.WriteString(p.w, sep); err != nil {
		return err
	}
	_, err = p.w.Write(data)
	return err
}

// runJSON is what JSON and YAML say of the run besides its files: whether
// it completed, and if not why, then the summary's fields (or, with no
// summary, the directory and whether it was a dry run).
func runJSON(dir string, dryRun bool, sum *prune.Summary, runErr error) ([]byte, error) {
	var status struct {
		Completed bool    `json:"completed"`
		Error     *string `json:"error"`
	}
	status.Completed = runErr == nil
	if runErr != nil {
		msg := runErr.Error()
		status.Error = &msg
	}
	head, err := json.Marshal(status)
	if err != nil {
		return nil, err
	}
	var body []byte
	if sum != nil {
		body, err = json.Marshal(sum)
	} else {
		body, err = json.Marshal(struct {
			Dir    string `json:"dir"`
			DryRun bool   `json:"dryRun"`
		}{dir, dryRun})
	}
	if err != nil {
		return nil, err
	}
	// Both are objects with at least one key: one object of both keys.
	return append(append(head[:len(head)-1], ','), body[1:]...), nil
}

// writeEnd closes the files list (or writes an empty one) and writes the
// run's outcome and summary as the object's remaining keys.
func (p *printer) writeEnd(sum *prune.Summary, runErr error) error {
	if p.err != nil {
		return p.err
	}
	obj, err := runJSON(p.dir, p.dryRun, sum, runErr)
	if err != nil {
		return err
	}
	if p.format == outputYAML {
		if p.n == 0 {
			if _, err := io.WriteString(p.w, "files: []\n"); err != nil {
				return err
			}
		}
		data, err := yaml.JSONToYAML(obj)
		if err != nil {
			return err
		}
		_, err = p.w.Write(data)
		return err
	}
	var end string
	if p.n == 0 {
		end = "{\n  \"files\": [],"
	} else {
		end = "\n  ],"
	}
	if _, err := io.WriteString(p.w, end); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, obj, "", "  "); err != nil {
		return err
	}
	// The object's keys without its opening brace: they follow "files".
	if _, err := p.w.Write(buf.Bytes()[1:]); err != nil {
		return err
	}
	_, err = io.WriteString(p.w, "\n")
	return err
}
