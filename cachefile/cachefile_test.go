package cachefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	thinDir      = "../prune/testdata/multus-real/thin-bridge"
	liveSandbox  = "2a9cc5e4f8b450e601bf2382e1b1e3d1f3c75dcc540ed467d27ac4be55130087"
	failedAdd    = "35d99114712fc62a00da4549ce5c4120d05c3a36df1eb7ad02e309dfaf08c86f"
	liveUID      = "f9bbbd0b-c09c-4ead-9c55-ba7d72b84b49"
	thinEth0     = "results/k8s-pod-network-" + liveSandbox + "-eth0"
	thinNet1     = "results/sec-net-default-" + liveSandbox + "-net1"
	thickName    = "cilium-0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce-eth0"
	thickFile    = "../prune/testdata/multus-real/thick-issue-1488/results/" + thickName
	thickSandbox = "0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce"
)

func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseCacheFile(t *testing.T) {
	thin := readFixture(t, filepath.Join(thinDir, thinEth0))
	thick := readFixture(t, thickFile)
	tests := []struct {
		name    string
		data    []byte
		want    CacheFile
		wantErr error
	}{
		{"thin eth0", thin, CacheFile{ContainerID: liveSandbox, PodUID: liveUID, PodNamespace: "default", PodName: "live-2"}, nil},
		{"thin net1", readFixture(t, filepath.Join(thinDir, thinNet1)), CacheFile{ContainerID: liveSandbox, PodUID: liveUID, PodNamespace: "default", PodName: "live-2"}, nil},
		{"thick", thick, CacheFile{ContainerID: thickSandbox, PodUID: "066d422b-2c4f-4848-b206-9da12d2e0de9",
			PodNamespace: "vc-prod-brandlift-hu", PodName: "ingress-public-kubernetes-ingress-c8kxx-x-ingress-x-vcluster"}, nil},
		{"thin mode: identity repeated with the same values", []byte(`{"kind":"cniCacheV1","containerId":"c","cniArgs":[["K8S_POD_UID","u"],["K8S_POD_NAME","a"],["IgnoreUnknown","1"],["K8S_POD_UID","u"],["K8S_POD_NAME","a"]]}`),
			CacheFile{ContainerID: "c", PodUID: "u", PodName: "a"}, nil},
		// Ambiguous files: a reader that takes the last value, or matches
		// keys regardless of case (encoding/json, in the CNI DEL), would see
		// another sandbox or pod than the prune.
		{"pod UID repeated with another value", []byte(`{"kind":"cniCacheV1","containerId":"c","cniArgs":[["K8S_POD_UID","first"],["K8S_POD_UID","second"]]}`), CacheFile{}, ErrConflict},
		{"pod name repeated with another value", []byte(`{"kind":"cniCacheV1","cniArgs":[["K8S_POD_NAME","a"],["K8S_POD_NAME","b"]]}`), CacheFile{}, ErrConflict},
		{"containerId twice", []byte(`{"kind":"cniCacheV1","containerId":"c","containerId":"d"}`), CacheFile{}, ErrConflict},
		{"containerId in another case", []byte(`{"kind":"cniCacheV1","containerId":"c","ContainerID":"d"}`), CacheFile{}, ErrConflict},
		{"containerId only in another case", []byte(`{"kind":"cniCacheV1","containerID":"d"}`), CacheFile{}, ErrConflict},
		{"escaped key naming containerId", []byte(`{"kind":"cniCacheV1","containerId":"c","\u0063ontainerId":"d"}`), CacheFile{}, ErrConflict},
		{"Kelvin sign folds to k", []byte("{\"kind\":\"cniCacheV1\",\"\u212aind\":\"x\"}"), CacheFile{}, ErrConflict},
		{"cniArgs twice", []byte(`{"kind":"cniCacheV1","cniArgs":[["K8S_POD_UID","u"]],"cniArgs":[]}`), CacheFile{}, ErrConflict},
		{"config twice", []byte(`{"kind":"cniCacheV1","config":"e30=","config":"e30="}`), CacheFile{}, ErrConflict},
		{"ifName in another case", []byte(`{"kind":"cniCacheV1","ifName":"eth0","IfName":"eth1"}`), CacheFile{}, ErrConflict},
		{"key order of another runtime", []byte(` {"cniArgs":[["K8S_POD_NAME","p"],["K8S_POD_UID","u"],["K8S_POD_NAMESPACE","ns"]],"result":{"ips":[{"address":"10.0.0.1/24"}]},"containerId":"c","kind":"cniCacheV1"} `),
			CacheFile{ContainerID: "c", PodUID: "u", PodNamespace: "ns", PodName: "p"}, nil},
		{"escaped strings", []byte(`{"kind":"cniCache\u00561","containerId":"c","cniArgs":[["K8S_POD_\u0055ID","u\"1"]]}`),
			CacheFile{ContainerID: "c", PodUID: `u"1`}, nil},
		{"no cniArgs", []byte(`{"kind":"cniCacheV1","containerId":"c"}`), CacheFile{ContainerID: "c"}, nil},
		{"null cniArgs", []byte(`{"kind":"cniCacheV1","cniArgs":null}`), CacheFile{}, nil},
		{"brackets inside skipped strings", []byte(`{"config":"]}[{\"","kind":"cniCacheV1","result":{"a":[[[]],{}],"b":"}"},"cniArgs":[["K8S_POD_UID","u"]]}`),
			CacheFile{PodUID: "u"}, nil},
		{"pre-2019 bare result", []byte(`{"cniVersion":"0.3.1","interfaces":[{"name":"eth0"}],"ips":[]}`), CacheFile{}, ErrNotCache},
		{"other kind", []byte(`{"kind":"cniCacheV2","cniArgs":[["K8S_POD_UID","u"]]}`), CacheFile{}, ErrNotCache},
		{"empty", nil, CacheFile{}, ErrSyntax},
		{"array", []byte(`[]`), CacheFile{}, ErrSyntax},
		{"trailing data", append(bytes.Clone(thin), []byte(`{}`)...), CacheFile{}, ErrSyntax},
		{"kind not a string", []byte(`{"kind":1}`), CacheFile{}, ErrSyntax},
		{"cniArgs pair of three", []byte(`{"kind":"cniCacheV1","cniArgs":[["K8S_POD_UID","u","x"]]}`), CacheFile{}, ErrSyntax},
		{"unbalanced skipped value", []byte(`{"kind":"cniCacheV1","result":{"a":[}]}`), CacheFile{}, ErrSyntax},
		{"control byte in string: not validated, never matches", []byte("{\"kind\":\"cniCache\nV1\"}"), CacheFile{}, ErrNotCache},
		{"deep nesting is skipped, not recursed", []byte(`{"kind":"cniCacheV1","result":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `,"cniArgs":[["K8S_POD_UID","u"]]}`),
			CacheFile{PodUID: "u"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCacheFile(tc.data)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestParseCacheFileTruncated: a file cut short anywhere (a crash during
// write, a full disk) is never taken for a complete one.
func TestParseCacheFileTruncated(t *testing.T) {
	for _, path := range []string{filepath.Join(thinDir, thinEth0), filepath.Join(thinDir, thinNet1), thickFile} {
		data := bytes.TrimSpace(readFixture(t, path))
		for n := 0; n < len(data); n++ {
			if _, err := ParseCacheFile(data[:n]); err == nil {
				t.Fatalf("%s cut to %d of %d bytes parsed without error", path, n, len(data))
			}
		}
	}
}

func TestSandboxIDFromResultsName(t *testing.T) {
	tests := []struct {
		name string
		want string
	}{
		{"k8s-pod-network-" + liveSandbox + "-eth0", liveSandbox},
		{"sec-net-default-" + liveSandbox + "-net1", liveSandbox},
		{thickName, thickSandbox},
		{liveSandbox + "-eth0", liveSandbox},
		{"net-" + thickSandbox + "-" + liveSandbox + "-eth0", liveSandbox}, // a 64-hex network name
		{"net-" + liveSandbox, ""},                                         // no interface
		{"net-" + strings.ToUpper(liveSandbox) + "-eth0", ""},
		{"net-x" + liveSandbox + "-eth0", ""},
		{"net-" + liveSandbox[:63] + "-eth0", ""},
		{"", ""},
	}
	for _, tc := range tests {
		id, ok := SandboxIDFromResultsName(tc.name)
		if got := map[bool]string{true: id.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("SandboxIDFromResultsName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// reference decodes with encoding/json: exact keys, last duplicate wins, the
// first occurrence of each pod key within cniArgs.
func reference(data []byte) (CacheFile, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil || top == nil {
		return CacheFile{}, false
	}
	str := func(key string) (string, bool) {
		raw, ok := top[key]
		if !ok {
			return "", true
		}
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	kind, ok1 := str("kind")
	cid, ok2 := str("containerId")
	if !ok1 || !ok2 || kind != "cniCacheV1" {
		return CacheFile{}, false
	}
	cf := CacheFile{ContainerID: cid}
	if raw, ok := top["cniArgs"]; ok {
		var args []json.RawMessage
		if json.Unmarshal(raw, &args) != nil {
			return CacheFile{}, false
		}
		seen := map[string]bool{}
		for _, a := range args {
			var pair []json.RawMessage
			if json.Unmarshal(a, &pair) != nil || len(pair) != 2 {
				return CacheFile{}, false
			}
			var kv [2]string
			for i, p := range pair {
				if len(p) == 0 || p[0] != '"' || json.Unmarshal(p, &kv[i]) != nil {
					return CacheFile{}, false
				}
			}
			if seen[kv[0]] {
				continue
			}
			seen[kv[0]] = true
			switch kv[0] {
			case "K8S_POD_UID":
				cf.PodUID = kv[1]
			case "K8S_POD_NAMESPACE":
				cf.PodNamespace = kv[1]
			case "K8S_POD_NAME":
				cf.PodName = kv[1]
			}
		}
	}
	return cf, true
}

func FuzzParseCacheFile(f *testing.F) {
	for _, path := range []string{filepath.Join(thinDir, thinEth0), filepath.Join(thinDir, thinNet1), thickFile} {
		f.Add(readFixture(f, path))
	}
	f.Add([]byte(`{"kind":"cniCacheV1","cniArgs":[["K8S_POD_UID","a"],["K8S_POD_UID","b"]]}`))
	f.Add([]byte(`{"cniVersion":"0.3.1","ips":[]}`))
	f.Add([]byte(`{"kind":"cniCacheV1","containerId":"c","ContainerId":"d"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseCacheFile(data)
		if err == nil {
			// A success is never a prefix of a longer document.
			trimmed := bytes.TrimRight(data, " \t\r\n")
			if _, err := ParseCacheFile(trimmed[:len(trimmed)-1]); err == nil {
				t.Fatalf("prefix of a parsed file parsed too: %q", data)
			}
		}
		// encoding/json replaces invalid UTF-8 where the scanner keeps the
		// bytes; neither can match a real UID, so the reference can't judge.
		if !json.Valid(data) || !utf8.Valid(data) || bytes.Count(data, []byte(`"kind"`)) > 1 || bytes.Count(data, []byte(`"cniArgs"`)) > 1 || bytes.Count(data, []byte(`"containerId"`)) > 1 {
			return // the reference can't judge invalid JSON or duplicate keys
		}
		if errors.Is(err, ErrConflict) {
			return
		}
		if err == nil {
			// What the prune read is what a lenient reader (encoding/json:
			// keys in any case, the last one wins) reads too, so the CNI
			// DEL acts on the pod and sandbox the prune judged.
			var lenient struct {
				ContainerID string      `json:"containerId"`
				CNIArgs     [][2]string `json:"cniArgs"`
			}
			if json.Unmarshal(data, &lenient) == nil {
				if lenient.ContainerID != got.ContainerID {
					t.Fatalf("containerId %q, lenient reader %q, for %q", got.ContainerID, lenient.ContainerID, data)
				}
				for _, kv := range lenient.CNIArgs {
					if kv[0] == "K8S_POD_UID" && kv[1] != got.PodUID {
						t.Fatalf("pod UID %q, lenient reader %q, for %q", got.PodUID, kv[1], data)
					}
				}
			}
		}
		want, ok := reference(data)
		if ok != (err == nil) {
			t.Fatalf("parse error %v, reference ok %v, for %q", err, ok, data)
		}
		if ok && got != want {
			t.Fatalf("got %+v, reference %+v, for %q", got, want, data)
		}
	})
}

func FuzzSandboxIDFromResultsName(f *testing.F) {
	f.Add("k8s-pod-network-" + liveSandbox + "-eth0")
	f.Add(thickName)
	f.Add(liveSandbox)
	f.Fuzz(func(t *testing.T, name string) {
		id, ok := SandboxIDFromResultsName(name)
		if !ok {
			return
		}
		s := id.String()
		i := strings.LastIndex(name, "-"+s+"-")
		if i < 0 && !strings.HasPrefix(name, s+"-") {
			t.Fatalf("%q: found %s, which is not a dash-bounded component", name, s)
		}
		if _, ok := ParseSandboxID(s); !ok {
			t.Fatalf("%q: %s does not round-trip", name, s)
		}
	})
}

// FuzzParseSandboxID checks the scratch-file name rule: phase 2 judges a
// scratch file by its name alone, so a name is a sandbox exactly when it is
// 64 lowercase hex digits, and the ID prints back as the same name.
func FuzzParseSandboxID(f *testing.F) {
	f.Add(liveSandbox)
	f.Add(strings.ToUpper(liveSandbox))
	f.Add(liveSandbox + "\n")
	f.Fuzz(func(t *testing.T, name string) {
		id, ok := ParseSandboxID(name)
		want := len(name) == 64 && strings.Trim(name, "0123456789abcdef") == ""
		if ok != want {
			t.Fatalf("ParseSandboxID(%q) ok = %v, want %v", name, ok, want)
		}
		if ok && id.String() != name {
			t.Fatalf("ParseSandboxID(%q) prints as %s", name, id)
		}
	})
}
