// Command calicolike is a CNI plugin for tests that fails as Calico's does
// when its configuration lacks what only Calico models: without
// "datastore_type" every command fails with Calico's error (code 999), the
// answer multus #1449 shows to the stripped copy of a conflist delegate that
// multus up to v4.3.0 sends on DEL. With it, the plugin does only the IPAM
// part of Calico's work: ADD and DEL delegate to the "ipam" plugin
// (host-local in the tests), so an address is reserved and released exactly
// as a node's IPAM does, and nothing else on the host changes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// conf is the part of the configuration the plugin reads.
type conf struct {
	types.PluginConf
	// DatastoreType stands for the fields of Calico's configuration that
	// multus's types.PluginConf does not model (datastore_type, kubeconfig,
	// nodename, ...): the ones its stored delegate loses.
	DatastoreType string `json:"datastore_type"`
}

// errNoConfig is Calico's error for a configuration without a datastore,
// with its code (999: "unknown", in Calico's CNI plugin).
var errNoConfig = &types.Error{Code: 999, Msg: "invalid configuration: no configuration has been provided, try setting KUBERNETES_MASTER environment variable"}

func load(data []byte) (*conf, error) {
	var c conf
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	if c.DatastoreType == "" {
		return nil, errNoConfig
	}
	if c.IPAM.Type == "" {
		return nil, errors.New("configuration has no ipam type")
	}
	return &c, nil
}

func add(args *skel.CmdArgs) error {
	c, err := load(args.StdinData)
	if err != nil {
		return err
	}
	res, err := invoke.DelegateAdd(context.Background(), c.IPAM.Type, args.StdinData, nil)
	if err != nil {
		return err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return err
	}
	return types.PrintResult(r, c.CNIVersion)
}

func del(args *skel.CmdArgs) error {
	c, err := load(args.StdinData)
	if err != nil {
		return err
	}
	return invoke.DelegateDel(context.Background(), c.IPAM.Type, args.StdinData, nil)
}

func check(args *skel.CmdArgs) error {
	_, err := load(args.StdinData)
	return err
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: check}, version.All, "calicolike: Calico's answer to a configuration without a datastore, host-local's IPAM")
}
