package cleanup

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// editDistance is the optimal string alignment distance between a and b:
// the insertions, deletions, substitutions and swaps of two neighbouring
// bytes that turn one into the other. A swap counts one edit, not two,
// because it is the commonest typo ("deploymnets").
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// closest returns the candidate nearest to name, if one is at most maxDist
// edits away; of equally near ones, the first.
func closest(name string, candidates []string, maxDist int) (string, bool) {
	best, bestDist := "", maxDist+1
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, best != ""
}

// resourceTypoDistance is how far a resource name may be from a served one
// to be taken for a typo of it: one edit in a short name, one more for each
// five bytes. Two different short names are often two edits apart
// (widgets, gadgets: two CRDs of one group), and taking one for a typo of
// the other would refuse a config that is right.
func resourceTypoDistance(name string) int {
	return max(1, len(name)/5)
}

// suggestResource returns the served resource that name most likely means,
// or "" if none is close: one whose short name or kind name is spelled
// (in any case), or whose name or singular name is within
// resourceTypoDistance of it. It also returns the names of all served
// resources, sorted, for a message that has no suggestion.
func suggestResource(name string, resources []metav1.APIResource) (string, []string) {
	var (
		names    []string
		best     string
		bestDist = resourceTypoDistance(name) + 1
	)
	lower := strings.ToLower(name)
	for _, r := range resources {
		if strings.Contains(r.Name, "/") { // a subresource
			continue
		}
		names = append(names, r.Name)
		d := editDistance(lower, r.Name)
		if r.SingularName != "" {
			d = min(d, editDistance(lower, r.SingularName))
		}
		if strings.EqualFold(name, r.Kind) || slices.ContainsFunc(r.ShortNames, func(s string) bool { return strings.EqualFold(s, name) }) {
			d = 0
		}
		if d < bestDist {
			best, bestDist = r.Name, d
		}
	}
	slices.Sort(names)
	return best, names
}
