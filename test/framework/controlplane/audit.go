package controlplane

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// AuditEvent is the part of an API server audit event the tests look at.
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// Complete reports whether the event is a request's end.
func (e AuditEvent) Complete() bool { return e.Stage == "ResponseComplete" }

// By reports whether the request was made with the user agent of the
// command agent ("sweepd" for sweepd/VERSION ...).
func (e AuditEvent) By(agent string) bool { return strings.HasPrefix(e.UserAgent, agent+"/") }

// ReadAudit returns the events of the audit log at path
// (ControlPlane.AuditLog), in order: a watch's ResponseStarted and, once it
// ends, its ResponseComplete, every other request's ResponseComplete (the
// harness's policy omits RequestReceived). A line that does not parse, a
// write cut short, is skipped.
func ReadAudit(t testing.TB, path string) []AuditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev AuditEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("audit log %s: %v", path, err)
	}
	return evs
}
