package e2e

import (
	"os"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework"
)

// TestMain runs the tests in a PID namespace of their own: the sweepd they
// start sees only their own fake kubelets, not test/node's real one that may
// run meanwhile (framework.RunInPIDNS).
func TestMain(m *testing.M) { os.Exit(framework.RunInPIDNS(m)) }
