package cleanup

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"pods", "pods", 0},
		{"pods", "", 4},
		{"customresourcedefinitons", "customresourcedefinitions", 1},
		{"deploymnets", "deployments", 1}, // a swap is one edit
		{"files-config.json", "file-config.json", 1},
		{"widgets", "gadgets", 2},
		{"abc", "ca", 3}, // optimal string alignment: no edit of a swapped pair
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestSuggestResource(t *testing.T) {
	apiext := []metav1.APIResource{
		{Name: "customresourcedefinitions", SingularName: "customresourcedefinition", Kind: "CustomResourceDefinition", ShortNames: []string{"crd", "crds"}},
		{Name: "customresourcedefinitions/status", Kind: "CustomResourceDefinition"},
	}
	core := []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Kind: "ConfigMap", ShortNames: []string{"cm"}},
		{Name: "secrets", SingularName: "secret", Kind: "Secret"},
		{Name: "pods", SingularName: "pod", Kind: "Pod", ShortNames: []string{"po"}},
		{Name: "pods/log", Kind: "Pod"},
	}
	// Two CRDs of one group whose names are two edits apart.
	crds := []metav1.APIResource{
		{Name: "gadgets", SingularName: "gadget", Kind: "Gadget"},
		{Name: "sprockets", SingularName: "sprocket", Kind: "Sprocket"},
	}
	tests := []struct {
		name      string
		resources []metav1.APIResource
		want      string
	}{
		{"customresourcedefinitons", apiext, "customresourcedefinitions"},
		{"crds", apiext, "customresourcedefinitions"},
		{"CustomResourceDefinition", apiext, "customresourcedefinitions"},
		{"confimaps", core, "configmaps"},
		{"ConfigMaps", core, "configmaps"},
		{"secert", core, "secrets"},
		{"cm", core, "configmaps"},
		{"deployments", core, ""}, // the wrong group, not a typo of a core name
		{"widgets", crds, ""},     // a removed sibling CRD, not a typo of gadgets
		{"gadgtes", crds, "gadgets"},
		{"status", apiext, ""}, // subresources are not candidates
	}
	for _, tt := range tests {
		got, served := suggestResource(tt.name, tt.resources)
		if got != tt.want {
			t.Errorf("suggestResource(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if !slices.IsSorted(served) || slices.ContainsFunc(served, func(s string) bool { return s == "pods/log" }) {
			t.Errorf("served %q: want the sorted resources without subresources", served)
		}
	}
}
