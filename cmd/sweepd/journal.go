package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/sweep-k8s/sweep/journal"
)

// journalCommand prints the node's journal of removals.
func journalCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "Print what the daemon removed on this node, newest last",
		Long: `Print the daemon's journal of what it removed and released on this node: one
line per file (its pod, UID and reason), kept in the state directory across
restarts and log rotation, the latest 4,000 or so.`,
		Example: `  # The last 20 removals, in the chart's daemon
  kubectl -n sweep-system exec ds/sweep -- /sweepd journal --limit 20

  # What went of one pod, and why
  sweepd journal --state-dir=/var/lib/sweep --pod=team/web-0

  # All it keeps, as JSON
  sweepd journal --state-dir=/var/lib/sweep --limit 0 -o json`,
		Args: noArgs,
	}
	var (
		dir    string
		limit  int
		output = outputTable
	)
	fs := cmd.Flags()
	fs.StringVar(&dir, "state-dir", "/var/lib/sweep", "the daemon's --state-dir")
	fs.IntVar(&limit, "limit", 100, "print the last this many (0: all)")
	fs.VarP(choiceValue{p: &output, choices: []string{outputTable, outputJSON, outputYAML}}, "output", "o", "output format: table, json or yaml")
	filter := addFilterFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if limit < 0 {
			return usagef("--limit %d: must not be negative", limit)
		}
		if err := filter.validate(); err != nil {
			return err
		}
		recs, err := journal.Read(dir, 0)
		if err != nil {
			e.log.Error("cannot read the journal", "error", err)
			return exitStatus(exitFail)
		}
		if filter.active() {
			// All of them, in order: a pod's scratch files are its by the
			// sandboxes of its results files before them.
			var matched []journal.Record
			for _, r := range recs {
				if filter.matchRecord(r) {
					matched = append(matched, r)
				}
			}
			recs = matched
		}
		if limit > 0 && len(recs) > limit {
			recs = recs[len(recs)-limit:]
		}
		if output != outputTable {
			if recs == nil {
				recs = []journal.Record{}
			}
			return writeObject(e.stdout, output, map[string]any{"records": recs})
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "AGE\tFILE\tPOD\tUID\tREASON")
		now := time.Now()
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", duration.HumanDuration(now.Sub(r.Time)), r.File, orNone(r.Pod), orNone(r.UID), r.Reason)
		}
		return tw.Flush()
	}
	return cmd
}
