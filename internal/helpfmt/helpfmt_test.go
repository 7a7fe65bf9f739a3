package helpfmt

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestFlags: descriptions wrap beside a column no wider than maxNameWidth;
// a longer name's description goes under it; in a narrow terminal every
// description goes under its name; no line is wider than the width unless
// one word is.
func TestFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.StringP("output", "o", "text", "output format: text, json or yaml, and a description long enough to be wrapped twice at least")
	fs.Bool("dry-run", false, "report; delete nothing")
	fs.Duration("kubelet-runtime-request-timeout-of-a-node", 2*time.Minute, "a flag whose name is longer than the column")
	fs.String("boot-id-file", "/proc/sys/kernel/random/boot_id", "where to read the boot ID (status.nodeInfo.bootID)")
	for _, width := range []int{80, 60, 132} {
		out := Flags(fs, width)
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if len(line) > width {
				t.Errorf("width %d: a line of %d columns: %q", width, len(line), line)
			}
		}
		words := strings.Join(strings.Fields(out), " ")
		for _, want := range []string{`-o, --output string`, `(default "text")`, "--dry-run", `(default 2m0s)`} {
			if !strings.Contains(words, want) {
				t.Errorf("width %d: no %q in\n%s", width, want, out)
			}
		}
		for _, want := range []string{"\n      --kubelet-runtime-request-timeout-of-a-node duration\n" + strings.Repeat(" ", descIndent) + "a flag"} {
			if !strings.Contains(out, want) {
				t.Errorf("width %d: no %q in\n%s", width, want, out)
			}
		}
	}
	if out := Flags(fs, 80); !regexp.MustCompile(`(?m)^  -o, --output string +output format`).MatchString(out) {
		t.Errorf("at 80, the description is not beside the name:\n%s", out)
	}
	if out := Flags(fs, 60); !strings.Contains(out, "  -o, --output string\n"+strings.Repeat(" ", descIndent)+"output format") {
		t.Errorf("at 60, the description is not under the name:\n%s", out)
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"a b c", 3, []string{"a b", "c"}},
		{"averylongword b", 5, []string{"averylongword", "b"}},
		{"one\ntwo three", 20, []string{"one", "two three"}},
	} {
		if got := Wrap(tc.s, tc.width); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("Wrap(%q, %d) = %q, want %q", tc.s, tc.width, got, tc.want)
		}
	}
	if got := UseLine("kubectl create x NAME --a=B (--c=D | --e=F) [--g=H]", 30); got != "  kubectl create x NAME --a=B\n      (--c=D | --e=F) [--g=H]" {
		t.Errorf("UseLine: %q", got)
	}
}
