package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Mapper resolves a resource to its kind and scope.
type Mapper interface {
	// Lookup returns the Target for gvr: Served false when the API server
	// does not serve it (e.g. its CRD is gone), with GroupVersionServed
	// and a did-you-mean when it serves the group/version.
	Lookup(gvr schema.GroupVersionResource) (Target, error)
}

// discoveryMapper reads the discovery document of one group/version at a
// time (/api/v1, /apis/<group>/<version>) and caches it. client-go's
// discovery package would do, but it links every built-in API type into the
// binary, which costs the node daemon about 8 MiB of resident memory.
type discoveryMapper struct {
	client *http.Client
	base   *url.URL

	mu    sync.Mutex
	lists map[schema.GroupVersion]*metav1.APIResourceList // nil: not served
}

func newDiscoveryMapper(cfg *rest.Config) (*discoveryMapper, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return &discoveryMapper{client: client, base: base, lists: map[schema.GroupVersion]*metav1.APIResourceList{}}, nil
}

// Lookup finds gvr by its plural or singular resource name. A name missing
// from the cached document is looked up once more, so that a CRD created a
// moment ago resolves.
func (m *discoveryMapper) Lookup(gvr schema.GroupVersionResource) (Target, error) {
	gv := gvr.GroupVersion()
	for fresh := false; ; fresh = true {
		list, err := m.list(gv, fresh)
		if err != nil {
			return Target{}, fmt.Errorf("discovery: %w", err)
		}
		if list == nil {
			return Target{GVR: gvr}, nil
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") { // a subresource
				continue
			}
			if r.Name == gvr.Resource || r.SingularName == gvr.Resource {
				return Target{
					Served:     true,
					GVR:        gv.WithResource(r.Name),
					Kind:       r.Kind,
					Namespaced: r.Namespaced,
				}, nil
			}
		}
		if fresh {
			didYouMean, served := suggestResource(gvr.Resource, list.APIResources)
			return Target{GVR: gvr, GroupVersionServed: true, DidYouMean: didYouMean, ServedResources: served}, nil
		}
	}
}

func (m *discoveryMapper) list(gv schema.GroupVersion, fresh bool) (*metav1.APIResourceList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if list, ok := m.lists[gv]; ok && !fresh {
		return list, nil
	}
	u := *m.base
	if gv.Group == "" {
		u.Path = path.Join(u.Path, "/api", gv.Version)
	} else {
		u.Path = path.Join(u.Path, "/apis", gv.Group, gv.Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		m.lists[gv] = nil
		return nil, nil
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", u.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	var list metav1.APIResourceList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.Path, err)
	}
	m.lists[gv] = &list
	return &list, nil
}
