// Package ranges reads host-local's configured ranges and its reservations
// on disk and counts addresses by state.
//
// A range comes from a CNI network configuration (a .conf, .conflist or
// .json file of the CNI configuration directory, as libcni reads them, and
// the delegates of multus's own), its reservations from host-local's data
// directory: one file per reserved address, <dataDir>/<network>/<address>.
// The counts are what an operator needs to see a range run dry: addresses
// in use by a sandbox the container runtime lists, held by one it does not
// list (leaked), and free. The daemon's gauges of them are the package's
// too (Reader), as is the gauge of the Whereabouts addresses the node's
// live pods hold (WhereaboutsHeld), both reporters of the daemon's runs
// (package report). The package decides nothing and removes nothing; it
// imports no client-go.
package ranges

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// DefaultConfDir is the CNI configuration directory of a standard node.
const DefaultConfDir = "/etc/cni/net.d"

// DefaultDataDir is host-local's data directory when its config names none.
const DefaultDataDir = "/var/lib/cni/networks"

// Range is one host-local range, as host-local completes it from its
// configuration: the first and last addresses it allocates, and the
// gateway it never allocates.
type Range struct {
	// Subnet is the range's subnet, without host bits.
	Subnet netip.Prefix
	// Start and End are the first and last addresses allocated, inclusive.
	Start, End netip.Addr
	// Gateway is never allocated; host-local's default is the subnet's
	// first address after the one written.
	Gateway netip.Addr
}

// Contains reports whether host-local may allocate a, the gateway
// included (a reservation of the gateway is still an address held).
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.Start.Is4() && a.Compare(r.Start) >= 0 && a.Compare(r.End) <= 0
}

// Size is the number of addresses host-local may allocate in r: Start to
// End, the gateway excepted when it is among them. A float, as the gauges
// take it: an IPv6 range may hold more than 2^64.
func (r Range) Size() float64 {
	n := new(big.Int).Sub(new(big.Int).SetBytes(r.End.AsSlice()), new(big.Int).SetBytes(r.Start.AsSlice()))
	n.Add(n, big.NewInt(1))
	if r.Contains(r.Gateway) {
		n.Sub(n, big.NewInt(1))
	}
	f, _ := n.Float64()
	return f
}

// Network is one host-local network: the name that its directory under
// the data directory has, and its ranges.
type Network struct {
	// Name is the network's name in its configuration.
	Name string
	// DataDir is host-local's data directory (ipam.dataDir).
	DataDir string
	// Ranges are the ranges of all its range sets, in order.
	Ranges []Range
	// File is the configuration file it was read from.
	File string
}

// maxRanges bounds the ranges of one network a configuration may give: a
// real one has a few, and each is a set of series.
const maxRanges = 16

// conf is what is read of a CNI configuration file: a single plugin's
// (.conf), a list's (.conflist) or multus's, whose delegates are either.
type conf struct {
	Name      string            `json:"name"`
	Type      string            `json:"type"`
	IPAM      *ipamConf         `json:"ipam"`
	Plugins   []json.RawMessage `json:"plugins"`
	Delegates []json.RawMessage `json:"delegates"`
}

type ipamConf struct {
	Type    string `json:"type"`
	DataDir string `json:"dataDir"`
	rangeConf
	Ranges [][]rangeConf `json:"ranges"`
}

type rangeConf struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart"`
	RangeEnd   string `json:"rangeEnd"`
	Gateway    string `json:"gateway"`
}

// ParseConfig returns the host-local networks of one CNI configuration
// file's content: its plugins whose ipam.type is host-local, with the
// name of the network (the list's, for a plugin of a list). A network
// whose ranges host-local would refuse is an error, and so is a file that
// is no JSON object; a file without host-local has no networks.
func ParseConfig(data []byte) ([]Network, error) {
	var c conf
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parse CNI configuration: %w", err)
	}
	var nets []Network
	if err := c.networks(&nets, true); err != nil {
		return nil, err
	}
	return nets, nil
}

// networks appends c's host-local networks to nets. Multus's delegates
// are read one level down only: a delegate is a network, not multus.
func (c conf) networks(nets *[]Network, top bool) error {
	if err := c.plugin(c.Name, nets); err != nil {
		return err
	}
	for _, raw := range c.Plugins {
		var p conf
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("network %q: parse plugin: %w", c.Name, err)
		}
		if err := p.plugin(c.Name, nets); err != nil {
			return err
		}
	}
	if !top {
		return nil
	}
	for _, raw := range c.Delegates {
		var d conf
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("network %q: parse delegate: %w", c.Name, err)
		}
		if err := d.networks(nets, false); err != nil {
			return err
		}
	}
	return nil
}

// plugin appends the network of one plugin, named name, if its IPAM is
// host-local.
func (c conf) plugin(name string, nets *[]Network) error {
	if c.IPAM == nil || c.IPAM.Type != "host-local" {
		return nil
	}
	if err := checkName(name); err != nil {
		return err
	}
	n := Network{Name: name, DataDir: c.IPAM.DataDir}
	if n.DataDir == "" {
		n.DataDir = DefaultDataDir
	}
	// As host-local: the range of the legacy fields first, as a range
	// set of its own, then the range sets.
	sets := c.IPAM.Ranges
	if c.IPAM.Subnet != "" {
		sets = append([][]rangeConf{{c.IPAM.rangeConf}}, sets...)
	}
	for _, set := range sets {
		for _, rc := range set {
			r, err := rc.parse()
			if err != nil {
				return fmt.Errorf("network %q: %w", name, err)
			}
			n.Ranges = append(n.Ranges, r)
		}
	}
	if len(n.Ranges) == 0 {
		return fmt.Errorf("network %q: host-local without a range", name)
	}
	if len(n.Ranges) > maxRanges {
		return fmt.Errorf("network %q: %d ranges, more than the %d counted", name, len(n.Ranges), maxRanges)
	}
	for i, r := range n.Ranges {
		for _, o := range n.Ranges[:i] {
			// host-local refuses overlapping ranges; counting them would
			// count an address twice.
			if o.Contains(r.Start) || o.Contains(r.End) || r.Contains(o.Start) || r.Contains(o.End) {
				return fmt.Errorf("network %q: ranges %s and %s overlap", name, o.Subnet, r.Subnet)
			}
		}
	}
	*nets = append(*nets, n)
	return nil
}

// checkName refuses a network name that is not one directory name under
// the data directory.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("network name %q is not a directory name", name)
	}
	return nil
}

var errNoSubnet = errors.New("range without a subnet")

// parse completes a range as host-local's Canonicalize does: a subnet with
// room for at least two addresses; the gateway, default the address after
// the subnet's as written, inside the subnet; the start, default that same
// address, and the end, default the subnet's last address (less the
// broadcast address for IPv4), inside the subnet.
func (rc rangeConf) parse() (Range, error) {
	if rc.Subnet == "" {
		return Range{}, errNoSubnet
	}
	p, err := netip.ParsePrefix(rc.Subnet)
	if err != nil {
		return Range{}, fmt.Errorf("subnet %q: %w", rc.Subnet, err)
	}
	if p.Addr().Zone() != "" || p.Addr().Is4In6() {
		return Range{}, fmt.Errorf("subnet %q: not a plain IPv4 or IPv6 subnet", rc.Subnet)
	}
	if p.Bits() > p.Addr().BitLen()-2 {
		return Range{}, fmt.Errorf("subnet %q: too small to allocate from", rc.Subnet)
	}
	r := Range{Subnet: p.Masked()}
	first := p.Addr().Next() // as written: host-local keeps the host bits
	last := lastAddr(r.Subnet)
	if p.Addr().Is4() {
		last = last.Prev() // the broadcast address
	}
	if r.Gateway, err = addrIn(rc.Gateway, first, r.Subnet, "gateway"); err != nil {
		return Range{}, err
	}
	if r.Start, err = addrIn(rc.RangeStart, first, r.Subnet, "rangeStart"); err != nil {
		return Range{}, err
	}
	if r.End, err = addrIn(rc.RangeEnd, last, r.Subnet, "rangeEnd"); err != nil {
		return Range{}, err
	}
	if r.End.Less(r.Start) {
		return Range{}, fmt.Errorf("subnet %s: rangeEnd %s before rangeStart %s", r.Subnet, r.End, r.Start)
	}
	return r, nil
}

// addrIn parses s, an address in subnet, or returns def for an empty s.
func addrIn(s string, def netip.Addr, subnet netip.Prefix, what string) (netip.Addr, error) {
	if s == "" {
		return def, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q: %w", what, s, err)
	}
	a = a.Unmap()
	if !subnet.Contains(a) {
		return netip.Addr{}, fmt.Errorf("%s %s not in subnet %s", what, a, subnet)
	}
	return a, nil
}

// lastAddr is the last address of p (all host bits set).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// merge adds the networks of one file to byKey, keyed by data directory
// and name: the first file, in libcni's order, wins a network that two
// name, as the first one is what a runtime loads.
func merge(byKey map[[2]string]Network, nets []Network) {
	for _, n := range nets {
		k := [2]string{n.DataDir, n.Name}
		if _, ok := byKey[k]; ok {
			// A list with two host-local plugins of one name shares one
			// directory; the first one's ranges are counted.
			continue
		}
		byKey[k] = n
	}
}

// sortNetworks orders networks by name, then data directory.
func sortNetworks(nets []Network) {
	slices.SortFunc(nets, func(a, b Network) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.DataDir, b.DataDir)
	})
}
