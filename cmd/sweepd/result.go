package main

import (
	"encoding/json"
	"fmt"
	"io"

	yamlv2 "go.yaml.in/yaml/v2"

	"github.com/sweep-k8s/sweep/cleanup"
)

// The -o of cleanup and uninstall: the text they always printed, or one
// JSON or YAML object with kubectl's camelCase keys.
const resultOutputUsage = "output format: text, json or yaml"

// resultFormats are the formats of -o on cleanup and uninstall.
var resultFormats = []string{outputText, outputJSON, outputYAML}

// writeObject writes v as one JSON (indented, as kubectl's -o json) or YAML
// object.
func writeObject(w io.Writer, format string, v any) error {
	var data []byte
	var err error
	if format == outputYAML {
		data, err = yamlv2.Marshal(v)
	} else {
		data, err = json.MarshalIndent(v, "", "  ")
		data = append(data, '\n')
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// cleanupResult is `sweepd cleanup -o json|yaml`.
type cleanupResult struct {
	Records []cleanupRecord `json:"records" yaml:"records"`
	Counts  map[string]int  `json:"counts" yaml:"counts"`
	// Completed is false when the run stopped or was refused; Error says
	// why.
	Completed bool    `json:"completed" yaml:"completed"`
	Error     *string `json:"error" yaml:"error"`
}

type cleanupRecord struct {
	Phase      string `json:"phase" yaml:"phase"`
	Object     string `json:"object" yaml:"object"`
	Outcome    string `json:"outcome" yaml:"outcome"`
	Reason     string `json:"reason,omitempty" yaml:"reason,omitempty"`
	MustDelete bool   `json:"mustDelete,omitempty" yaml:"mustDelete,omitempty"`
}

// writeCleanup writes the summary of a cleanup run that ended with err.
func writeCleanup(w io.Writer, format string, sum *cleanup.Summary, err error) error {
	if format == outputText {
		return sum.WriteText(w)
	}
	res := cleanupResult{Records: []cleanupRecord{}, Counts: map[string]int{}, Completed: err == nil}
	for _, o := range []cleanup.Outcome{cleanup.Deleted, cleanup.Collected, cleanup.WouldDelete, cleanup.Skipped, cleanup.Failed} {
		res.Counts[string(o)] = sum.Count("", o)
	}
	for _, r := range sum.Records() {
		res.Records = append(res.Records, cleanupRecord{Phase: string(r.Phase), Object: r.Object, Outcome: string(r.Outcome),
			Reason: r.Reason, MustDelete: r.MustDelete})
	}
	if err != nil {
		msg := err.Error()
		res.Error = &msg
	}
	return writeObject(w, format, res)
}

// uninstallResult is `sweepd uninstall -o json|yaml`: what was asked, and
// whether the daemons finished it.
type uninstallResult struct {
	Namespace string  `json:"namespace" yaml:"namespace"`
	ConfigMap string  `json:"configMap" yaml:"configMap"`
	DaemonSet string  `json:"daemonSet" yaml:"daemonSet"`
	Completed bool    `json:"completed" yaml:"completed"`
	Error     *string `json:"error" yaml:"error"`
}

// writeUninstall writes the outcome of an uninstall request.
func writeUninstall(w io.Writer, format string, res uninstallResult, err error) error {
	if err != nil {
		msg := err.Error()
		res.Error = &msg
	}
	res.Completed = err == nil
	if format == outputText {
		if err != nil {
			return nil // the log says why
		}
		_, werr := fmt.Fprintf(w, "uninstall complete: every node of daemonset %s/%s cleaned, the DaemonSet and its RBAC deleted\n",
			res.Namespace, res.DaemonSet)
		return werr
	}
	return writeObject(w, format, res)
}
