package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sweep-k8s/sweep/internal/version"
)

// kubeFlags are the Kubernetes access flags shared by the subcommands that talk
// to the API server.
type kubeFlags struct {
	kubeconfig string
}

func addKubeFlags(fs *flag.FlagSet) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to a kubeconfig file; default $KUBECONFIG, else the in-cluster config")
	return k
}

// restConfig resolves --kubeconfig, else $KUBECONFIG, else the in-cluster
// config. ~/.kube/config is deliberately not consulted: a node daemon must not
// pick up an admin's credentials by accident.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case k.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	case os.Getenv("KUBECONFIG") != "":
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "sweepd/" + version.Version()
	return cfg, nil
}
