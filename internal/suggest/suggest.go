// Package suggest finds the flags, or the words of a flag's value, that a
// mistyped one may have meant, for the "did you mean" of a usage error, as
// kubectl suggests commands.
package suggest

import (
	"cmp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Flags returns the names of the flags of fs that name (a flag's name
// without dashes, as the user typed it) may have meant: those that contain
// it or that it contains as a whole word, and those within two edits of it.
// Hidden flags are left out.
func Flags(fs *pflag.FlagSet, name string) []string {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	if len(name) < 2 {
		return nil
	}
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == name {
			return
		}
		if wordOf(f.Name, name) || wordOf(name, f.Name) || distance(f.Name, name) <= 2 {
			out = append(out, f.Name)
		}
	})
	// A flag that ends with the word typed first: --from is kubectl's
	// "create job --from", which is --job-from here.
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a, name), rank(b, name)), strings.Compare(a, b))
	})
	return out
}

// Words returns the words of a closed set (a flag's values) that typed may
// have meant, by the rules of Flags, in the set's order.
func Words(words []string, typed string) []string {
	typed = strings.ToLower(typed)
	if len(typed) < 2 {
		return nil
	}
	var out []string
	for _, w := range words {
		if w != typed && (wordOf(w, typed) || wordOf(typed, w) || distance(w, typed) <= 2) {
			out = append(out, w)
		}
	}
	return out
}

// rank orders the suggestions for name: 0 for a flag that ends with it as
// a word, 1 for the others.
func rank(flag, name string) int {
	if strings.HasSuffix(flag, "-"+name) {
		return 0
	}
	return 1
}

// wordOf reports whether part is one or more whole dash-separated words of
// s: "from" of "job-from", "dry-run" of "server-dry-run".
func wordOf(s, part string) bool {
	return len(part) >= 3 && (strings.HasPrefix(s, part+"-") || strings.HasSuffix(s, "-"+part) || strings.Contains(s, "-"+part+"-"))
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
