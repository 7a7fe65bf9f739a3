package suggest

import (
	"fmt"
	"testing"

	"github.com/spf13/pflag"
)

func TestFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	for _, n := range []string{"job-from", "from-daemon", "dry-run", "multus-dir", "min-age", "namespace", "output"} {
		fs.String(n, "", "")
	}
	fs.String("secret", "", "")
	_ = fs.MarkHidden("secret")
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"from", []string{"job-from", "from-daemon"}},
		{"--dryrun", []string{"dry-run"}},
		{"multus-directory", nil},
		{"multusdir", []string{"multus-dir"}},
		{"min-ages=5m", []string{"min-age"}},
		{"namspace", []string{"namespace"}},
		{"secrets", nil},
		{"o", nil},
		{"zzz", nil},
	} {
		if got := Flags(fs, tc.typed); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Flags(%q) = %v, want %v", tc.typed, got, tc.want)
		}
	}
}

func TestWords(t *testing.T) {
	reasons := []string{"pod-gone", "pod-live", "sandbox-live", "too-young", "cni-del-failed"}
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"pod-lve", []string{"pod-live"}},
		{"Too-Yong", []string{"too-young"}},
		{"live", []string{"pod-live", "sandbox-live"}},
		{"cni-del", []string{"cni-del-failed"}},
		{"pod-live", nil},
		{"x", nil},
		{"unrelated", nil},
	} {
		if got := Words(reasons, tc.typed); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Words(%q) = %v, want %v", tc.typed, got, tc.want)
		}
	}
}
