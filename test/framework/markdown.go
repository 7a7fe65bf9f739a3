package framework

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// WithoutCodeBlocks blanks the fenced code blocks of a Markdown text, whose
// lines are neither headings nor links.
func WithoutCodeBlocks(text string) string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// GitHubAnchors returns the anchors GitHub gives the ATX headings of a
// Markdown text: GitHubSlug of each, with -1, -2, ... for repeats.
func GitHubAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	for _, l := range strings.Split(WithoutCodeBlocks(text), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := GitHubSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// GitHubSlug is the anchor GitHub gives a heading: its rendered text (no
// backticks or emphasis, a link's text only) in lower case, without
// punctuation but hyphens and underscores, each space a hyphen.
func GitHubSlug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
