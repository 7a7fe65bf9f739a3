// Package helpfmt lays out the commands' --help as kubectl's habits want
// it and in the width of the terminal: flags with their descriptions
// wrapped to it, a long flag's description on the line after its name, and
// a usage line wrapped with a hanging indent. pflag's own wrapping keeps a
// column as wide as the longest flag and gives up on a word longer than
// what is left of the line, which made lines of 159 columns at 80.
package helpfmt

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// maxNameWidth bounds the column of flag names: a longer name has its
// description on the next line, so that one long flag does not narrow
// every description.
const maxNameWidth = 32

// descIndent is the indent of a description under its flag's name.
const descIndent = 10

// minDescWidth is the narrowest column of descriptions beside the names;
// in a terminal too narrow for it, each description goes under its name.
const minDescWidth = 40

// Width is the width to lay help out in, as kubectl does: the terminal's,
// else $COLUMNS, else 80.
func Width(w io.Writer) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	if cols, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && cols > 0 {
		return cols
	}
	return 80
}

// Flags lays out the visible flags of fs in width columns, each line ending
// in a newline.
func Flags(fs *pflag.FlagSet, width int) string {
	type entry struct{ name, usage string }
	var entries []entry
	col := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		e := entry{name: name(f), usage: usage(f)}
		if len(e.name) <= maxNameWidth {
			col = max(col, len(e.name))
		}
		entries = append(entries, e)
	})
	var b strings.Builder
	for _, e := range entries {
		if len(e.name) <= col && width-col-3 >= minDescWidth && longestWord(e.usage) <= width-col-3 {
			lines := Wrap(e.usage, width-col-3)
			fmt.Fprintf(&b, "%-*s   %s\n", col, e.name, lines[0])
			for _, l := range lines[1:] {
				fmt.Fprintf(&b, "%s%s\n", strings.Repeat(" ", col+3), l)
			}
			continue
		}
		b.WriteString(e.name + "\n")
		for _, l := range Wrap(e.usage, width-descIndent) {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat(" ", descIndent), l)
		}
	}
	return b.String()
}

// UseLine wraps a usage line to width: its first line indented by 2, the
// rest by 6.
func UseLine(line string, width int) string {
	words := strings.Fields(line)
	var b strings.Builder
	n := 0
	for i, w := range words {
		switch {
		case i == 0:
			b.WriteString("  " + w)
			n = 2 + len(w)
		case n+1+len(w) > width && n > 6:
			b.WriteString("\n      " + w)
			n = 6 + len(w)
		default:
			b.WriteString(" " + w)
			n += 1 + len(w)
		}
	}
	return b.String()
}

// Wrap breaks s into lines of at most width columns at spaces, a word
// longer than width on a line of its own; it keeps s's own line breaks.
// It returns one line at least.
func Wrap(s string, width int) []string {
	width = max(width, 1)
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			switch {
			case line == "":
				line = w
			case len(line)+1+len(w) > width:
				lines = append(lines, line)
				line = w
			default:
				line += " " + w
			}
		}
		lines = append(lines, line)
	}
	return lines
}

// longestWord is the length of the longest word of s: one that does not
// fit beside the names puts its description under its name.
func longestWord(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		n = max(n, len(w))
	}
	return n
}

// name is a flag's name column: "  -o, --output string".
func name(f *pflag.Flag) string {
	s := "      --" + f.Name
	if f.Shorthand != "" && f.ShorthandDeprecated == "" {
		s = "  -" + f.Shorthand + ", --" + f.Name
	}
	varname, _ := pflag.UnquoteUsage(f)
	if varname != "" {
		s += " " + varname
	}
	if f.NoOptDefVal != "" {
		switch f.Value.Type() {
		case "string":
			s += fmt.Sprintf("[=%q]", f.NoOptDefVal)
		case "bool":
			if f.NoOptDefVal != "true" {
				s += "[=" + f.NoOptDefVal + "]"
			}
		case "count":
			if f.NoOptDefVal != "+1" {
				s += "[=" + f.NoOptDefVal + "]"
			}
		default:
			s += "[=" + f.NoOptDefVal + "]"
		}
	}
	return s
}

// usage is a flag's description, with its default unless that is the
// zero value, as pflag prints them.
func usage(f *pflag.Flag) string {
	_, u := pflag.UnquoteUsage(f)
	if !zeroDefault(f) {
		if f.Value.Type() == "string" {
			u += fmt.Sprintf(" (default %q)", f.DefValue)
		} else {
			u += fmt.Sprintf(" (default %s)", f.DefValue)
		}
	}
	if f.Deprecated != "" {
		u += fmt.Sprintf(" (DEPRECATED: %s)", f.Deprecated)
	}
	return u
}

// zeroDefault reports whether f's default is its type's zero value, which
// help does not print.
func zeroDefault(f *pflag.Flag) bool {
	switch f.Value.Type() {
	case "bool":
		return f.DefValue == "false"
	case "duration":
		return f.DefValue == "0" || f.DefValue == "0s"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count", "float32", "float64":
		return f.DefValue == "0"
	case "string":
		return f.DefValue == ""
	case "ip", "ipMask", "ipNet":
		return f.DefValue == "<nil>"
	case "intSlice", "stringSlice", "stringArray", "strings":
		return f.DefValue == "[]" || f.DefValue == ""
	}
	switch f.DefValue {
	case "false", "<nil>", "", "0", "[]":
		return true
	}
	return false
}
