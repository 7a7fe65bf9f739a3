// Package exepages unmaps the pages of the running executable that a
// long-lived process mapped once and may not touch again, so that its
// resident memory is the code it runs, not the code it ran.
//
// Why it is needed: the kernel maps a file's pages around each one a
// process touches (fault-around, 64 KiB by default), and a Go binary's
// start-up (every package's init, flag parsing, the first list of every
// watch) and its garbage collector (the runtime's tables of every function
// on a stack) touch it from end to end. A daemon of a 17 MB binary that then
// idles for an hour keeps 15 MiB of it mapped, three quarters of its
// resident memory (docs/measurements.md). Unmapped, those pages stay in the
// page cache, shared and clean; what the process touches again is mapped
// again by a minor fault, and what it does not is reclaimable by the kernel
// without unmapping anything.
package exepages

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one mapping of /proc/PID/smaps, with what Release decides by.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Dev        string // "fe:00"
	Inode      uint64
	Rss        uint64 // bytes
	Anonymous  uint64 // bytes: pages copied on write, a private mapping's own
	Locked     bool   // mlock(2)ed: madvise refuses it
}

// droppable reports whether m's pages can be unmapped without changing
// what the process reads there: a private mapping that is not writable
// and has no page of its own (a copy on write: the relocations of a
// RELRO segment, a debugger's breakpoint) is the file's content, which a
// fault maps again as it was.
func (m Mapping) droppable() bool {
	return len(m.Perms) == 4 && m.Perms[0] == 'r' && m.Perms[1] == '-' && m.Perms[3] == 'p' &&
		m.Anonymous == 0 && !m.Locked && m.End > m.Start
}

// Release unmaps the pages of the executable's read-only mappings (its
// code, its constants, the runtime's tables) from the calling process and
// returns how many bytes of them were resident.
func Release() (uint64, error) {
	maps, err := Own()
	if err != nil {
		return 0, err
	}
	var released uint64
	for _, m := range maps {
		if !m.droppable() {
			continue
		}
		// A page of the range touched since smaps was read is mapped
		// again at its next use, as any other.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("exepages: madvise %x-%x: %w", m.Start, m.End, errno)
		}
		released += m.Rss
	}
	return released, nil
}

// Own returns the calling process's mappings of its executable, as
// /proc/self/smaps has them now. They are found by the address of a
// function of this package, not by the executable's path or inode, which
// an overlay file system reports differently in stat(2) and in
// /proc/self/maps: they are those of the same file (device and inode) as
// the one holding that address.
func Own() ([]Mapping, error) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("exepages: %w", err)
	}
	maps, err := ParseSmaps(data)
	if err != nil {
		return nil, fmt.Errorf("exepages: %w", err)
	}
	return Executable(maps, uint64(reflect.ValueOf(Own).Pointer())), nil
}

// Executable returns the mappings of the file mapped at addr, in maps:
// none when no file is.
func Executable(maps []Mapping, addr uint64) []Mapping {
	var exe *Mapping
	for i := range maps {
		if maps[i].Start <= addr && addr < maps[i].End {
			exe = &maps[i]
			break
		}
	}
	if exe == nil || exe.Inode == 0 {
		return nil
	}
	var out []Mapping
	for _, m := range maps {
		if m.Dev == exe.Dev && m.Inode == exe.Inode {
			out = append(out, m)
		}
	}
	return out
}

// ParseSmaps parses the format of /proc/PID/smaps: a header line per
// mapping ("start-end perms offset dev inode [path]"), then "Key: value"
// lines. A mapping whose fields it cannot read is an error, never a
// mapping with zero values: Release would take a zero Anonymous for a
// mapping without pages of its own.
func ParseSmaps(data []byte) ([]Mapping, error) {
	var maps []Mapping
	var rss, anon bool // the last mapping's fields seen
	complete := func() error {
		if len(maps) > 0 && (!rss || !anon) {
			return fmt.Errorf("mapping %x: no Rss or Anonymous", maps[len(maps)-1].Start)
		}
		return nil
	}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		key, value, _ := strings.Cut(line, ":")
		if strings.ContainsAny(key, " -") { // a header's range and perms
			if err := complete(); err != nil {
				return nil, err
			}
			m, err := parseHeader(line)
			if err != nil {
				return nil, err
			}
			maps = append(maps, m)
			rss, anon = false, false
			continue
		}
		if len(maps) == 0 {
			return nil, fmt.Errorf("%q before any mapping", line)
		}
		m := &maps[len(maps)-1]
		var err error
		switch key {
		case "Rss":
			m.Rss, err = kB(value)
			rss = true
		case "Anonymous":
			m.Anonymous, err = kB(value)
			anon = true
		case "Locked":
			var n uint64
			n, err = kB(value)
			m.Locked = m.Locked || n > 0
		case "VmFlags":
			m.Locked = m.Locked || slices.Contains(strings.Fields(value), "lo")
		}
		if err != nil {
			return nil, fmt.Errorf("mapping %x: %s: %w", m.Start, key, err)
		}
	}
	if err := complete(); err != nil {
		return nil, err
	}
	return maps, nil
}

// parseHeader parses "start-end perms offset dev inode [path]".
func parseHeader(line string) (Mapping, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return Mapping{}, fmt.Errorf("not a mapping: %q", line)
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, fmt.Errorf("not an address range: %q", f[0])
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	inode, err3 := strconv.ParseUint(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Mapping{}, fmt.Errorf("mapping %q: %w", line, err)
	}
	if end < start || len(f[1]) != 4 {
		return Mapping{}, fmt.Errorf("not a mapping: %q", line)
	}
	return Mapping{Start: start, End: end, Perms: f[1], Dev: f[3], Inode: inode}, nil
}

// kB parses a size as smaps gives it ("  1234 kB") into bytes.
func kB(s string) (uint64, error) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), " kB")
	if !ok {
		return 0, fmt.Errorf("%q is not in kB", strings.TrimSpace(s))
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, err
	}
	return n << 10, nil
}
