package prune_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sweep-k8s/sweep/prune"
)

// TestReasonSets: every exported Reason constant of the package is in one
// of the closed sets that the metrics and the docs are made from, and no set
// names one twice: a reason left out would silently vanish from the
// metrics.
func TestReasonSets(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	sets := map[string][]prune.Reason{
		"RemovedReasons": prune.RemovedReasons(), "KeptReasons": prune.KeptReasons(),
		"ReservationReleasedReasons": prune.ReservationReleasedReasons(), "ReservationKeptReasons": prune.ReservationKeptReasons(),
		"RetryReasons": prune.RetryReasons(),
	}
	for name, set := range sets {
		sorted := slices.Clone(set)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(set) {
			t.Errorf("%s names a reason twice: %v", name, set)
		}
	}
	found := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "prune" {
			continue // the external tests
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
					continue
				}
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !n.IsExported() || !ok {
						continue
					}
					found++
					r := prune.Reason(lit.Value[1 : len(lit.Value)-1])
					in := false
					for _, set := range sets {
						in = in || slices.Contains(set, r)
					}
					if !in {
						t.Errorf("%s (%q) is in no reason set: add it to one in reasons.go", n.Name, r)
					}
				}
			}
		}
	}
	if found < 25 {
		t.Fatalf("found %d Reason constants; has their declaration changed?", found)
	}
}

// TestRetryReasons: each reason a results file is kept for is either worth
// a retry (RetryReasons, a targeted run says so of the pod) or lasting, in
// the list below; a new kept reason fails here until it is put in one, so
// that whether a deleted pod's check tries again is decided, not left to a
// default.
func TestRetryReasons(t *testing.T) {
	lasting := []prune.Reason{
		prune.ReasonPodLive, prune.ReasonSandboxReferenced, prune.ReasonUnparseable, prune.ReasonNotCache,
		prune.ReasonNoIdentity, prune.ReasonTooLarge, prune.ReasonNotRegular, prune.ReasonOtherName,
		prune.ReasonStaticPod, prune.ReasonNoResultsDir, prune.ReasonConflicting, prune.ReasonNotTarget,
	}
	retry := prune.RetryReasons()
	for _, r := range retry {
		if !slices.Contains(prune.KeptReasons(), r) {
			t.Errorf("RetryReasons names %q, which is no reason a file is kept for", r)
		}
		if slices.Contains(lasting, r) {
			t.Errorf("%q is both worth a retry and lasting", r)
		}
	}
	for _, r := range prune.KeptReasons() {
		if !slices.Contains(retry, r) && !slices.Contains(lasting, r) {
			t.Errorf("kept reason %q is neither in RetryReasons nor lasting: decide whether a deleted pod's check tries again", r)
		}
		if got, want := prune.Retried(r), slices.Contains(retry, r); got != want {
			t.Errorf("Retried(%q) = %v, want %v", r, got, want)
		}
	}
}
