package prune

import (
	"github.com/sweep-k8s/sweep/cachefile"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sweep-k8s/sweep/internal/atomicfile"
)

// DefaultBootIDFile is where Linux publishes the ID of the current boot: a
// random UUID, new at every boot.
const DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"

// BootRecordFile is the boot record's file name under the state directory.
const BootRecordFile = "boot-record.json"

// maxBootRecordSize bounds what is read of the boot record. It holds the
// sandboxes of the files kept by one run, about 70 bytes each: far below
// this for any real node.
const maxBootRecordSize = 16 << 20

// ErrBootRecordCorrupt means the boot record could not be used; the state is
// then as if there were none, so nothing is earlier-boot.
var ErrBootRecordCorrupt = errors.New("corrupt boot record")

// ReadBootID reads the current boot ID from path (DefaultBootIDFile on a
// node; a test fakes it with a file of its own).
func ReadBootID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if id == "" || len(id) > 128 || strings.ContainsAny(id, " \t\r\n") {
		return "", fmt.Errorf("boot id in %s: not one word of at most 128 bytes", path)
	}
	return id, nil
}

// bootRecord is the file's content.
type bootRecord struct {
	// BootID is the boot under which Sandboxes were seen.
	BootID string `json:"bootID"`
	// Sandboxes were named by results files kept by the last run under
	// BootID and not known to be from an earlier boot.
	Sandboxes []string `json:"sandboxes"`
	// EarlierBoot were recorded under a boot before BootID and kept by the
	// last run all the same (a file the runtime still knew, an unreadable
	// or changed file): they stay earlier-boot until their files go.
	EarlierBoot []string `json:"earlierBoot"`
}

// BootState is reboot-aware staleness: which sandboxes were seen under an
// earlier boot of the node. It lives in a file under a directory that
// survives reboots (--state-dir), and holds the sandboxes of the results
// files kept by the last run (those removed do not matter), so it is bounded
// by the files that stay, not by the cache. Mtimes are never compared with
// the boot time: clocks jump at boot.
//
// It implements BootRecord. It is not safe for concurrent use; the daemon
// runs one prune at a time.
type BootState struct {
	dir     string
	bootID  string
	earlier map[SandboxID]struct{}
}

// LoadBootState reads the record under dir for the current boot bootID.
// With no record (first run) nothing is earlier-boot. When the record's boot
// is another one, everything it holds is earlier-boot, however many boots
// have passed since. A record that cannot be read or parsed is reported
// (ErrBootRecordCorrupt for bad content) with a usable state as if there
// were no record: fail safe, nothing is earlier-boot.
func LoadBootState(dir, bootID string) (*BootState, error) {
	b := &BootState{dir: dir, bootID: bootID, earlier: map[SandboxID]struct{}{}}
	path := filepath.Join(dir, BootRecordFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read boot record: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBootRecordSize+1))
	if err != nil {
		return b, fmt.Errorf("read boot record: %w", err)
	}
	if len(data) > maxBootRecordSize {
		return b, fmt.Errorf("%w: %s is larger than %d bytes", ErrBootRecordCorrupt, path, maxBootRecordSize)
	}
	earlier, err := parseBootRecord(data, bootID)
	if err != nil {
		return b, fmt.Errorf("%w: %s: %w", ErrBootRecordCorrupt, path, err)
	}
	b.earlier = earlier
	return b, nil
}

// parseBootRecord returns the sandboxes of a record that are earlier-boot
// for the current boot bootID. Any flaw fails the whole record.
func parseBootRecord(data []byte, bootID string) (map[SandboxID]struct{}, error) {
	var rec bootRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	if rec.BootID == "" {
		return nil, errors.New("no boot id")
	}
	earlier := map[SandboxID]struct{}{}
	for _, l := range []struct {
		ids     []string
		earlier bool
	}{{rec.EarlierBoot, true}, {rec.Sandboxes, rec.BootID != bootID}} {
		for _, s := range l.ids {
			id, ok := cachefile.ParseSandboxID(s)
			if !ok {
				return nil, fmt.Errorf("bad sandbox id %q", s)
			}
			if l.earlier {
				earlier[id] = struct{}{}
			}
		}
	}
	return earlier, nil
}

// BootID returns the current boot's ID.
func (b *BootState) BootID() string { return b.bootID }

// Earlier returns how many sandboxes are known to be from an earlier boot.
func (b *BootState) Earlier() int { return len(b.earlier) }

// EarlierBoot implements BootRecord.
func (b *BootState) EarlierBoot(id SandboxID) bool {
	_, ok := b.earlier[id]
	return ok
}

// Save records the sandboxes of a run that read every results file
// (Summary.KeptSandboxes): those known to be from an earlier boot stay so,
// the others are recorded under the current boot. The state in memory is
// updated even when writing fails; the file is replaced atomically (temporary
// file, fsync, rename, fsync of the directory), so a crash leaves the old
// record or the new one.
func (b *BootState) Save(kept map[SandboxID]struct{}) error {
	rec := bootRecord{BootID: b.bootID, Sandboxes: []string{}, EarlierBoot: []string{}}
	earlier := map[SandboxID]struct{}{}
	for id := range kept {
		if _, ok := b.earlier[id]; ok {
			earlier[id] = struct{}{}
			rec.EarlierBoot = append(rec.EarlierBoot, id.String())
		} else {
			rec.Sandboxes = append(rec.Sandboxes, id.String())
		}
	}
	b.earlier = earlier
	sort.Strings(rec.Sandboxes)
	sort.Strings(rec.EarlierBoot)
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("write boot record: %w", err)
	}
	if err := atomicfile.Write(b.dir, BootRecordFile, data); err != nil {
		return fmt.Errorf("write boot record: %w", err)
	}
	return nil
}
