package exepages

import (
	"reflect"
	"strings"
	"testing"
)

// smaps is /proc/PID/smaps of a process of a dynamically linked binary (a
// RELRO segment with pages of its own), cut to the fields that matter.
const smaps = `00400000-00bc1000 r-xp 00000000 fe:00 9978245                            /tmp/sweepd
Size:               7940 kB
Rss:                7428 kB
Anonymous:             0 kB
Locked:                0 kB
VmFlags: rd ex mr mw me
00bc1000-01402000 r--p 007c1000 fe:00 9978245                            /tmp/sweepd
Rss:                7684 kB
Anonymous:             0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd mr mw me
01402000-01403000 r--p 01002000 fe:00 9978245                            /tmp/sweepd
Rss:                   4 kB
Anonymous:             4 kB
Locked:                0 kB
VmFlags: rd mr mw me ac
01403000-0148a000 rw-p 01003000 fe:00 9978245                            /tmp/sweepd
Rss:                 416 kB
Anonymous:           120 kB
Locked:                0 kB
VmFlags: rd wr mr mw me ac
0148a000-0354c000 rw-p 00000000 00:00 0
Rss:                 120 kB
Anonymous:           120 kB
Locked:                0 kB
VmFlags: rd wr mr mw me ac
7f0006209000-7f000627d000 r-xp 00000000 fe:00 247026                     /usr/lib/libc.so.6
Rss:                 356 kB
Anonymous:             0 kB
Locked:                0 kB
VmFlags: rd ex mr mw me
7f000637d000-7f000638f000 r--p 00000000 fe:00 9978245                    /tmp/sweepd (deleted)
Rss:                  16 kB
Anonymous:             0 kB
Locked:               16 kB
VmFlags: rd mr mw me lo
`

func TestParseSmaps(t *testing.T) {
	maps, err := ParseSmaps([]byte(smaps))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x400000, End: 0xbc1000, Perms: "r-xp", Dev: "fe:00", Inode: 9978245, Rss: 7428 << 10},
		{Start: 0xbc1000, End: 0x1402000, Perms: "r--p", Dev: "fe:00", Inode: 9978245, Rss: 7684 << 10},
		{Start: 0x1402000, End: 0x1403000, Perms: "r--p", Dev: "fe:00", Inode: 9978245, Rss: 4 << 10, Anonymous: 4 << 10},
		{Start: 0x1403000, End: 0x148a000, Perms: "rw-p", Dev: "fe:00", Inode: 9978245, Rss: 416 << 10, Anonymous: 120 << 10},
		{Start: 0x148a000, End: 0x354c000, Perms: "rw-p", Dev: "00:00", Rss: 120 << 10, Anonymous: 120 << 10},
		{Start: 0x7f0006209000, End: 0x7f000627d000, Perms: "r-xp", Dev: "fe:00", Inode: 247026, Rss: 356 << 10},
		{Start: 0x7f000637d000, End: 0x7f000638f000, Perms: "r--p", Dev: "fe:00", Inode: 9978245, Rss: 16 << 10, Locked: true},
	}
	if !reflect.DeepEqual(maps, want) {
		t.Errorf("ParseSmaps:\n got %+v\nwant %+v", maps, want)
	}
}

func TestParseSmapsRefuses(t *testing.T) {
	header := "00400000-00bc1000 r-xp 00000000 fe:00 9978245 /tmp/sweepd\n"
	for name, in := range map[string]string{
		"field first":         "Rss: 4 kB\n",
		"no Anonymous":        header + "Rss: 4 kB\n",
		"no Anonymous, next":  header + "Rss: 4 kB\n" + header + "Rss: 4 kB\nAnonymous: 0 kB\n",
		"Anonymous in pages":  header + "Rss: 4 kB\nAnonymous: 1\n",
		"Anonymous negative":  header + "Rss: 4 kB\nAnonymous: -4 kB\n",
		"range backwards":     "00bc1000-00400000 r-xp 00000000 fe:00 9978245 /tmp/sweepd\nRss: 4 kB\nAnonymous: 0 kB\n",
		"range not hex":       "00400000-zz r-xp 00000000 fe:00 9978245 /tmp/sweepd\nRss: 4 kB\nAnonymous: 0 kB\n",
		"inode not a number":  "00400000-00bc1000 r-xp 00000000 fe:00 x /tmp/sweepd\nRss: 4 kB\nAnonymous: 0 kB\n",
		"short header":        "00400000-00bc1000 r-xp 00000000\n",
		"perms of five chars": "00400000-00bc1000 r-xps 00000000 fe:00 1 /a\nRss: 4 kB\nAnonymous: 0 kB\n",
	} {
		if maps, err := ParseSmaps([]byte(in)); err == nil {
			t.Errorf("%s: ParseSmaps = %+v, want an error", name, maps)
		}
	}
}

func TestExecutableAndDroppable(t *testing.T) {
	maps, err := ParseSmaps([]byte(smaps))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range Executable(maps, 0x500000) {
		if m.droppable() {
			got = append(got, m.Perms)
		}
	}
	// The code and the constants; not the page of relocations (copied on
	// write), the data, another file's code, or a locked mapping.
	if want := []string{"r-xp", "r--p"}; !reflect.DeepEqual(got, want) {
		t.Errorf("droppable mappings of the executable: %v, want %v", got, want)
	}
	for _, addr := range []uint64{0x3000000, 0x100, 0xffffffffffff} {
		if exe := Executable(maps, addr); exe != nil {
			t.Errorf("Executable(%#x) = %+v, want none: no file is mapped there", addr, exe)
		}
	}
}

// TestRelease unmaps this test binary's pages and reads its smaps again:
// what is mapped of the code and constants now is what ran since, and a
// mapping with pages of its own (the RELRO segment of a -race binary,
// which the dynamic loader wrote) keeps them.
func TestRelease(t *testing.T) {
	before := ownMappings(t)
	released, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := ownMappings(t)
	var resident uint64
	for i, m := range after {
		if m.droppable() {
			resident += m.Rss
		} else if m.Anonymous != before[i].Anonymous && !strings.HasPrefix(m.Perms, "rw") {
			t.Errorf("mapping %x (%s): Anonymous %d before, %d after: a page of its own was dropped", m.Start, m.Perms, before[i].Anonymous, m.Anonymous)
		}
	}
	t.Logf("released %d KiB, %d KiB mapped again since", released>>10, resident>>10)
	if released == 0 || resident >= released {
		t.Errorf("released %d bytes, and %d bytes are mapped after: want fewer than released", released, resident)
	}
}

func ownMappings(t *testing.T) []Mapping {
	t.Helper()
	maps, err := Own()
	if err != nil {
		t.Fatal(err)
	}
	return maps
}

func FuzzParseSmaps(f *testing.F) {
	f.Add([]byte(smaps))
	f.Add([]byte("00400000-00bc1000 r-xp 00000000 fe:00 9978245\nRss: 4 kB\nAnonymous: 0 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		maps, err := ParseSmaps(data)
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start || len(m.Perms) != 4 {
				t.Errorf("ParseSmaps returned %+v", m)
			}
		}
	})
}

// BenchmarkRelease is what the daemon's run pays at its end: reading its
// smaps and unmapping (the faults that map pages again come after, as
// they are touched).
func BenchmarkRelease(b *testing.B) {
	for b.Loop() {
		if _, err := Release(); err != nil {
			b.Fatal(err)
		}
	}
}
