package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanDependencies keeps sweepd's resident memory within the node
// daemon's budget (25 MiB with 110 pods): the packages below register every
// built-in Kubernetes API type at start-up, which alone costs about 8 MiB of
// resident memory. Use the metadata and dynamic clients instead. gRPC
// alone costs about 5 MiB: the CRI client (package cri) speaks the gRPC
// protocol with connect-go, already linked for sweepd cleanup.
func TestLeanDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch pkg {
		case "k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme", "k8s.io/client-go/discovery",
			"google.golang.org/grpc", "k8s.io/cri-api/pkg/apis/runtime/v1", "k8s.io/cri-client/pkg":
			t.Errorf("sweepd depends on %s", pkg)
		}
	}
}
