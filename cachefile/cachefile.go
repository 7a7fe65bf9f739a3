// Package cachefile reads the multus and libcni CNI cache files: the sandbox
// IDs they are named by and the identity (sandbox, pod, network, interface)
// a results file carries. It decides nothing: package prune judges by what
// it reads, and cri and cnidel read the same format without depending on
// what decides to delete.
package cachefile

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// SandboxID is a pod sandbox (infra container) ID: 64 lowercase hex digits on
// disk, 32 bytes in memory so that sets of them stay small.
type SandboxID [32]byte

// String returns the 64-hex form.
func (id SandboxID) String() string { return hex.EncodeToString(id[:]) }

// ParseSandboxID parses exactly 64 lowercase hex digits. Upper case is refused
// because runtimes never write it, and a scratch file name must match exactly.
func ParseSandboxID(s string) (SandboxID, bool) {
	var id SandboxID
	if len(s) != 64 {
		return id, false
	}
	// One pass, no allocation: the prune parses a few of these per file.
	for i := range id {
		hi, ok1 := lowerHexValue(s[2*i])
		lo, ok2 := lowerHexValue(s[2*i+1])
		if !ok1 || !ok2 {
			return SandboxID{}, false
		}
		id[i] = hi<<4 | lo
	}
	return id, true
}

// lowerHexValue is the value of a lowercase hex digit.
func lowerHexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// SandboxIDFromResultsName finds the sandbox ID in a results file name,
// `<networkName>-<sandboxID>-<ifName>`. Network and interface names may
// contain dashes, so the ID is the last 64-hex run bounded by dashes that is
// followed by an interface name.
func SandboxIDFromResultsName(name string) (SandboxID, bool) {
	for end := len(name) - 1; end >= 64; end-- {
		if name[end] != '-' {
			continue
		}
		start := end - 64
		if start > 0 && name[start-1] != '-' {
			continue
		}
		if id, ok := ParseSandboxID(name[start:end]); ok {
			return id, true
		}
	}
	return SandboxID{}, false
}

// CacheFile is what the prune needs from a libcni result cache file
// (`{"kind":"cniCacheV1",...}`): the sandbox and the pod it belongs to.
type CacheFile struct {
	ContainerID  string
	PodUID       string
	PodNamespace string
	PodName      string
}

// Errors returned by ParseCacheFile. Both mean the file carries no usable
// identity and must be kept.
var (
	// ErrNotCache is a well-formed JSON object that is not a cniCacheV1 file,
	// such as the bare results libcni wrote before 2019.
	ErrNotCache = errors.New("not a cniCacheV1 file")
	// ErrSyntax is anything that is not one well-formed JSON object:
	// truncated, corrupt or empty.
	ErrSyntax = errors.New("malformed cache file")
	// ErrConflict is a file that two JSON readers could read as two
	// identities: a key of the cache format twice, or once more in another
	// case (encoding/json, which the CNI DEL's libcni uses, matches keys
	// case-insensitively and lets the last one win), or a pod identity in
	// cniArgs repeated with another value.
	ErrConflict = errors.New("cache file names its identity ambiguously")
)

// cacheKeys are the top-level keys of libcni's cniCacheV1 format.
var cacheKeys = [...]string{"kind", "containerId", "cniArgs", "config", "ifName",
	"networkName", "netns", "capabilityArgs", "result"}

// cacheKey tells which top-level key of the cniCacheV1 format k names, as a
// bit, and whether exactly or only up to case. Real files name every key
// exactly, so the folding comparisons run only for keys no writer uses.
func cacheKey(k []byte) (bit uint16, exact bool) {
	for i, name := range cacheKeys {
		if string(k) == name {
			return 1 << i, true
		}
	}
	for i, name := range cacheKeys {
		if bytes.EqualFold(k, []byte(name)) {
			return 1 << i, false
		}
	}
	return 0, false
}

// ParseCacheFile extracts the identity from a libcni cache file without
// decoding the rest: `config` and `result` are skipped unread, which is most
// of every file. Keys may come in any order. In thin mode multus repeats the
// runtime's CNI_ARGS after its own, so a pod identity may come twice, with
// the same value. The whole input must be exactly one JSON object, so that a
// truncated file is never mistaken for a complete one, and must name its
// identity unambiguously (ErrConflict), so that every reader of it, the CNI
// DEL's included, agrees on whose it is.
func ParseCacheFile(data []byte) (CacheFile, error) {
	var (
		cf   CacheFile
		kind string
		seen uint16
	)
	s := scanner{data: data}
	if !s.consume('{') {
		return cf, fmt.Errorf("%w: not an object", ErrSyntax)
	}
	if !s.consume('}') {
		for {
			key, ok := s.stringValueBytes()
			if !ok || !s.consume(':') {
				return cf, fmt.Errorf("%w: bad key at offset %d", ErrSyntax, s.pos)
			}
			if bit, exact := cacheKey(key); bit != 0 {
				if !exact || seen&bit != 0 {
					return cf, fmt.Errorf("%w: key %q", ErrConflict, key)
				}
				seen |= bit
			}
			switch string(key) { // no allocation: the compiler compares in place
			case "kind":
				v, ok := s.stringValue()
				if !ok {
					return cf, fmt.Errorf("%w: bad kind", ErrSyntax)
				}
				kind = v
			case "containerId":
				v, ok := s.stringValue()
				if !ok {
					return cf, fmt.Errorf("%w: bad containerId", ErrSyntax)
				}
				cf.ContainerID = v
			case "cniArgs":
				if err := s.cniArgs(&cf); err != nil {
					return cf, err
				}
			default:
				if !s.skipValue() {
					return cf, fmt.Errorf("%w: bad value of %q at offset %d", ErrSyntax, key, s.pos)
				}
			}
			if s.consume(',') {
				continue
			}
			if s.consume('}') {
				break
			}
			return cf, fmt.Errorf("%w: expected , or } at offset %d", ErrSyntax, s.pos)
		}
	}
	s.skipSpace()
	if s.pos != len(s.data) {
		return cf, fmt.Errorf("%w: trailing data at offset %d", ErrSyntax, s.pos)
	}
	if kind != "cniCacheV1" {
		return cf, ErrNotCache
	}
	return cf, nil
}

// scanner is a minimal JSON reader over a byte slice. It validates enough to
// be sure where every value ends and never recurses, so hostile nesting costs
// nothing but a counter.
type scanner struct {
	data []byte
	pos  int
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// rawString reads a string and returns its raw bytes between the quotes. It
// jumps from quote to quote with bytes.IndexByte, since the long base64
// config is most of a cache file.
func (s *scanner) rawString() ([]byte, bool) {
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false
	}
	start := s.pos + 1
	for i := start; ; {
		q := bytes.IndexByte(s.data[i:], '"')
		if q < 0 {
			return nil, false
		}
		end := i + q
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for j := end - 1; j >= start && s.data[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			s.pos = end + 1
			return s.data[start:end], true
		}
		i = end + 1
	}
}

// stringValueBytes reads a string and returns it unescaped, without a copy
// when it has no escapes.
func (s *scanner) stringValueBytes() ([]byte, bool) {
	start := s.pos
	raw, ok := s.rawString()
	if !ok {
		return nil, false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, true
	}
	end := s.pos
	s.pos = start
	v, ok := s.stringValue()
	s.pos = end
	return []byte(v), ok
}

// stringValue reads a string value and unescapes it.
func (s *scanner) stringValue() (string, bool) {
	start := s.pos
	raw, ok := s.rawString()
	if !ok {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	// Escapes are rare in cache files; let encoding/json get them right.
	var v string
	s.skipSpace()
	if err := json.Unmarshal(bytes.TrimSpace(s.data[start:s.pos]), &v); err != nil {
		return "", false
	}
	return v, true
}

// cniArgs reads `[["KEY","VALUE"], ...]`, keeping the pod identity. A key of
// the identity that comes again must come with the same value.
func (s *scanner) cniArgs(cf *CacheFile) error {
	bad := func() error { return fmt.Errorf("%w: bad cniArgs at offset %d", ErrSyntax, s.pos) }
	if s.consume('n') { // null
		if !s.literal("ull") {
			return bad()
		}
		return nil
	}
	if !s.consume('[') {
		return bad()
	}
	if s.consume(']') {
		return nil
	}
	var seenUID, seenNS, seenName bool
	for {
		if !s.consume('[') {
			return bad()
		}
		k, ok := s.stringValueBytes()
		if !ok || !s.consume(',') {
			return bad()
		}
		vstart := s.pos
		if _, ok := s.rawString(); !ok || !s.consume(']') {
			return bad()
		}
		// Only the three values the prune needs become strings; the other
		// pairs are skipped without allocating.
		var dst *string
		var seen *bool
		switch string(k) {
		case "K8S_POD_UID":
			dst, seen = &cf.PodUID, &seenUID
		case "K8S_POD_NAMESPACE":
			dst, seen = &cf.PodNamespace, &seenNS
		case "K8S_POD_NAME":
			dst, seen = &cf.PodName, &seenName
		}
		if dst != nil {
			end := s.pos
			s.pos = vstart
			v, ok := s.stringValue()
			if !ok {
				return bad()
			}
			s.pos = end
			if *seen && v != *dst {
				return fmt.Errorf("%w: %s given twice, as %q and %q", ErrConflict, k, *dst, v)
			}
			*dst, *seen = v, true
		}
		if s.consume(',') {
			continue
		}
		if !s.consume(']') {
			return bad()
		}
		return nil
	}
}

func (s *scanner) literal(rest string) bool {
	if len(s.data)-s.pos < len(rest) || string(s.data[s.pos:s.pos+len(rest)]) != rest {
		return false
	}
	s.pos += len(rest)
	return true
}

// skipValue skips one JSON value of any kind. Containers are matched with a
// stack of bracket kinds packed in a byte slice; strings are skipped whole so
// brackets inside them do not count. Scalars are checked loosely: the prune
// only needs to know where they end.
func (s *scanner) skipValue() bool {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return false
	}
	var stack []byte
	for {
		s.skipSpace()
		if s.pos >= len(s.data) {
			return false
		}
		switch c := s.data[s.pos]; c {
		case '"':
			if _, ok := s.rawString(); !ok {
				return false
			}
		case '{', '[':
			stack = append(stack, c)
			s.pos++
			continue
		case '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != c-2 { // '{'+2=='}', '['+2==']'
				return false
			}
			stack = stack[:len(stack)-1]
			s.pos++
		case ',', ':':
			if len(stack) == 0 {
				return false
			}
			s.pos++
			continue
		default:
			start := s.pos
			for s.pos < len(s.data) && isScalarByte(s.data[s.pos]) {
				s.pos++
			}
			if s.pos == start {
				return false
			}
		}
		if len(stack) == 0 {
			return true
		}
	}
}

func isScalarByte(c byte) bool {
	return ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'E'
}
