// Command rootplugin is a CNI plugin for cnidel's tests that works only
// where its root holds /etc/sweep-test-root, as a dynamically linked plugin
// works only where its root holds the host's libraries: it records its call
// in /out/<CNI_COMMAND>.json and succeeds there, and fails anywhere else.
// Built static by the test (CGO_ENABLED=0), so that it runs in a root that
// holds nothing but itself.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if _, err := os.Stat("/etc/sweep-test-root"); err != nil {
		fmt.Printf(`{"cniVersion":"1.0.0","code":999,"msg":"not in its root: %s"}`, err)
		os.Exit(1)
	}
	wd, _ := os.Getwd()
	call := map[string]string{"cwd": wd}
	for _, k := range []string{"CNI_COMMAND", "CNI_NETNS", "CNI_PATH", "CNI_CONTAINERID"} {
		call[k] = os.Getenv(k)
	}
	data, _ := json.Marshal(call)
	if err := os.WriteFile("/out/"+os.Getenv("CNI_COMMAND")+".json", data, 0o600); err != nil {
		fmt.Printf(`{"cniVersion":"1.0.0","code":999,"msg":%q}`, err.Error())
		os.Exit(1)
	}
}
