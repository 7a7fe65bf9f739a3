package uninstall

import "k8s.io/apimachinery/pkg/runtime"

func fromUnstructured(m map[string]any, into any) error {
	if m == nil {
		return nil
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
