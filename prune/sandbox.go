package prune

import "github.com/sweep-k8s/sweep/cachefile"

// SandboxID is a pod sandbox's ID as the cache files name it
// (cachefile.SandboxID): the one prune's views and records speak of.
type SandboxID = cachefile.SandboxID
