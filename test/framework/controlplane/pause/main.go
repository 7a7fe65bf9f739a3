// Command pause is the sandbox ("pause") image of the test node
// (controlplane.StartNode): it holds a pod's namespaces until the runtime
// stops it. No registry is reachable from the tests, so the image is built
// from this program rather than pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
