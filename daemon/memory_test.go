package daemon

import (
	"log/slog"
	"testing"

	"github.com/sweep-k8s/sweep/internal/exepages"
)

// TestReturnMemoryUnmapsBinary: what a run ends with unmaps the binary's
// pages (package exepages), not only the heap it freed.
func TestReturnMemoryUnmapsBinary(t *testing.T) {
	d := &Daemon{log: slog.New(slog.DiscardHandler)}
	before := binaryResident(t)
	d.returnMemory()
	after := binaryResident(t)
	t.Logf("the binary's read-only pages mapped: %d KiB before, %d KiB after", before>>10, after>>10)
	if after >= before {
		t.Errorf("the binary's read-only pages mapped: %d bytes before returnMemory, %d after: want fewer", before, after)
	}
}

// binaryResident is how much of this test binary's read-only mappings is
// resident.
func binaryResident(t *testing.T) uint64 {
	t.Helper()
	maps, err := exepages.Own()
	if err != nil {
		t.Fatal(err)
	}
	var rss uint64
	for _, m := range maps {
		if m.Perms[1] != 'w' {
			rss += m.Rss
		}
	}
	return rss
}
