package ranges_test

import (
	"encoding/json"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/ranges"
)

// hostLocal is a .conf of one bridge plugin with host-local's ipam.
func hostLocal(ipam string) string {
	return `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"host-local",` + ipam + `}}`
}

func TestParseConfig(t *testing.T) {
	type want struct {
		name, dataDir, subnet string
		size                  float64
	}
	tests := []struct {
		name    string
		conf    string
		want    []want
		wantErr string
	}{
		// host-local allocates .2 to .254 of a /24: .0 is the network,
		// .255 the broadcast address, .1 the default gateway.
		{name: "ipv4 /24", conf: hostLocal(`"subnet":"10.1.0.0/24"`), want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 253}}},
		{name: "ipv4 /30", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/30"}]]`), want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/30", 1}}},
		{name: "ipv4 /16", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/16"}]]`), want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/16", 65533}}},
		{name: "rangeStart and rangeEnd, gateway outside", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.20"}]]`),
			want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 11}}},
		{name: "gateway inside the range", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.20","gateway":"10.1.0.15"}]]`),
			want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 10}}},
		{name: "gateway last", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/24","gateway":"10.1.0.254"}]]`),
			want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 253}}},
		{name: "legacy fields with a gateway", conf: hostLocal(`"subnet":"10.1.0.0/24","rangeStart":"10.1.0.100","gateway":"10.1.0.1"`),
			want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 155}}},
		// No broadcast address in IPv6: ::1 (the gateway) to ::ff.
		{name: "ipv6 /120", conf: hostLocal(`"ranges":[[{"subnet":"fd00::/120"}]]`), want: []want{{"net1", ranges.DefaultDataDir, "fd00::/120", 254}}},
		{name: "ipv6 /64", conf: hostLocal(`"ranges":[[{"subnet":"fd00:1::/64"}]]`), want: []want{{"net1", ranges.DefaultDataDir, "fd00:1::/64", math.Exp2(64) - 2}}},
		{name: "dual stack and legacy first", conf: hostLocal(`"subnet":"10.2.0.0/24","ranges":[[{"subnet":"10.1.0.0/24"},{"subnet":"10.3.0.0/24"}],[{"subnet":"fd00::/120"}]]`),
			want: []want{
				{"net1", ranges.DefaultDataDir, "10.2.0.0/24", 253},
				{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 253},
				{"net1", ranges.DefaultDataDir, "10.3.0.0/24", 253},
				{"net1", ranges.DefaultDataDir, "fd00::/120", 254},
			}},
		{name: "host bits in the subnet", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.5/24"}]]`), want: []want{{"net1", ranges.DefaultDataDir, "10.1.0.0/24", 248}}},
		{name: "data directory", conf: hostLocal(`"dataDir":"/run/ipam","subnet":"10.1.0.0/24"`), want: []want{{"net1", "/run/ipam", "10.1.0.0/24", 253}}},
		{name: "conflist names the network", conf: `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}},{"type":"portmap"}]}`,
			want: []want{{"pods", ranges.DefaultDataDir, "10.1.0.0/24", 253}}},
		{name: "multus delegates", conf: `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","delegates":[{"name":"pods","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}]}]}`,
			want: []want{{"pods", ranges.DefaultDataDir, "10.1.0.0/24", 253}}},
		{name: "other ipam", conf: `{"name":"x","type":"bridge","ipam":{"type":"whereabouts","range":"10.1.0.0/24"}}`},
		{name: "no ipam", conf: `{"name":"x","plugins":[{"type":"calico"}]}`},
		{name: "not json", conf: `name=x`, wantErr: "parse CNI configuration"},
		{name: "no range", conf: hostLocal(`"routes":[]`), wantErr: "without a range"},
		{name: "ipv4 /31", conf: hostLocal(`"subnet":"10.1.0.0/31"`), wantErr: "too small"},
		{name: "ipv6 /127", conf: hostLocal(`"subnet":"fd00::/127"`), wantErr: "too small"},
		{name: "bad subnet", conf: hostLocal(`"subnet":"10.1.0.0"`), wantErr: "subnet"},
		{name: "gateway outside the subnet", conf: hostLocal(`"subnet":"10.1.0.0/24","gateway":"10.2.0.1"`), wantErr: "not in subnet"},
		{name: "rangeStart outside the subnet", conf: hostLocal(`"subnet":"10.1.0.0/24","rangeStart":"10.2.0.1"`), wantErr: "not in subnet"},
		{name: "end before start", conf: hostLocal(`"subnet":"10.1.0.0/24","rangeStart":"10.1.0.9","rangeEnd":"10.1.0.8"`), wantErr: "before rangeStart"},
		{name: "overlap", conf: hostLocal(`"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.1.0.0/16"}]]`), wantErr: "overlap"},
		{name: "name with a slash", conf: `{"name":"../x","type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, wantErr: "not a directory name"},
		{name: "no name", conf: `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, wantErr: "not a directory name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nets, err := ranges.ParseConfig([]byte(tt.conf))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, n := range nets {
				for _, r := range n.Ranges {
					got = append(got, want{n.Name, n.DataDir, r.Subnet.String(), r.Size()})
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("range %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestRangeBounds(t *testing.T) {
	nets, err := ranges.ParseConfig([]byte(hostLocal(`"subnet":"10.1.0.0/24"`)))
	if err != nil {
		t.Fatal(err)
	}
	r := nets[0].Ranges[0]
	// As host-local completes it: .1 to .254, .1 the gateway.
	if r.Start != netip.MustParseAddr("10.1.0.1") || r.End != netip.MustParseAddr("10.1.0.254") || r.Gateway != netip.MustParseAddr("10.1.0.1") {
		t.Errorf("range %+v", r)
	}
	for _, a := range []string{"10.1.0.0", "10.1.0.255", "10.2.0.5", "fd00::1"} {
		if r.Contains(netip.MustParseAddr(a)) {
			t.Errorf("%s in %+v", a, r)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(hostLocal(`"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.20","gateway":"10.1.0.15"`)))
	f.Add([]byte(hostLocal(`"ranges":[[{"subnet":"fd00::/120"}],[{"subnet":"10.1.0.0/30"}]]`)))
	f.Add([]byte(`{"name":"m","type":"multus","delegates":[{"name":"pods","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}]}]}`))
	f.Add([]byte(`{"name":"x","ipam":{"type":"host-local","subnet":"::ffff:10.0.0.0/120"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		nets, err := ranges.ParseConfig(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("%q is no JSON, and parsed", data)
		}
		for _, n := range nets {
			if n.Name == "" || strings.Contains(n.Name, "/") || n.Name == ".." || len(n.Ranges) == 0 {
				t.Fatalf("network %+v", n)
			}
			for i, r := range n.Ranges {
				// Every range is one host-local could allocate from: in
				// its subnet, start before end, at least one address
				// besides the gateway, and disjoint from the others.
				if !r.Subnet.Contains(r.Start) || !r.Subnet.Contains(r.End) || r.End.Less(r.Start) || !(r.Size() >= 0) {
					t.Fatalf("range %+v of %q", r, data)
				}
				for _, o := range n.Ranges[:i] {
					if o.Contains(r.Start) || r.Contains(o.Start) {
						t.Fatalf("ranges %+v and %+v overlap", o, r)
					}
				}
			}
		}
	})
}
