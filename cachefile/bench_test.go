package cachefile_test

import (
	"testing"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// BenchmarkParseCacheFile reads the identity of one results file as
// multus writes it.
func BenchmarkParseCacheFile(b *testing.B) {
	data := multuscache.ResultsJSON(multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.UID("p")}, multuscache.DefaultAttachments()[0])
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := cachefile.ParseCacheFile(data); err != nil {
			b.Fatal(err)
		}
	}
}
