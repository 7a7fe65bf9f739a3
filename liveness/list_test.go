package liveness

import (
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// TestListNodePodsRefusedAtOnce: a refused connection ends the one-shot
// list with kubectl's hint instead of retrying until the timeout (which
// would end it "within" the timeout).
func TestListNodePodsRefusedAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client, err := metadata.NewForConfig(&rest.Config{Host: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ListNodePods(t.Context(), client, "n1", time.Hour, nil)
	if err == nil || strings.Contains(err.Error(), "within") ||
		!strings.Contains(err.Error(), "the connection to the server "+addr+" was refused - did you specify the right host or port?") {
		t.Fatalf("err %v, want the refusal at once, with the hint", err)
	}
}
