package gate

import (
	"strings"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// requestNamespaceBySplit is RequestNamespace as it was written first, splitting the
// path: the reference the allocation-free version must agree with on every path.
func requestNamespaceBySplit(path string) (namespace string, fence, ok bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	i := 0
	for i < len(segs) && segs[i] != "api" && segs[i] != "apis" {
		i++
	}
	if i == len(segs) {
		return "", true, false
	}
	rest := segs[i+1:]
	switch segs[i] {
	case "api":
		if len(rest) < 2 {
			return "", true, false
		}
		rest = rest[1:]
	case "apis":
		if len(rest) < 3 {
			return "", true, false
		}
		switch rest[0] {
		case "authorization.k8s.io", "authentication.k8s.io":
			return "", false, true
		}
		rest = rest[2:]
	}
	switch {
	case rest[0] == "":
		return "", true, false
	case rest[0] != "namespaces" || len(rest) == 1:
		return partition.ClusterKey, true, true
	case rest[1] == "":
		return "", true, false
	case len(rest) == 2:
		return partition.ClusterKey, true, true
	default:
		return rest[1], true, true
	}
}

// FuzzRequestNamespace: the allocation-free RequestNamespace answers as the split-based
// reference on any path (seeded with the shapes of TestRequestNamespace and their edges).
func FuzzRequestNamespace(f *testing.F) {
	for _, p := range []string{
		"", "/", "//", "api", "/api", "/api/", "/api/v1", "/api/v1/", "/api/v1/namespaces", "/api/v1/namespaces/",
		"/api/v1/namespaces/ns", "/api/v1/namespaces/ns/", "/api/v1/namespaces/ns/finalize", "/api/v1/namespaces//pods",
		"/api/v1/namespaces/ns/pods/p/status/extra/more/segments", "/apis/apps/v1/namespaces/ns/deployments/d",
		"/apis/apps", "/apis/apps/v1", "/apis/apps/v1/", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
		"/apis/authentication.k8s.io", "/k8s/clusters/c/api/v1/nodes/n", "/healthz", "/api/v1/nodes/n1/status",
		"/x/apis/api/v1/namespaces/a/b", "///api///v1//namespaces", "/api/v1/namespaces/a/b/c/d/e/f/g/h",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		ns, fence, ok := RequestNamespace(path)
		wantNS, wantFence, wantOK := requestNamespaceBySplit(path)
		if ns != wantNS || fence != wantFence || ok != wantOK {
			t.Errorf("RequestNamespace(%q) = %q, %t, %t; the reference says %q, %t, %t", path, ns, fence, ok, wantNS, wantFence, wantOK)
		}
	})
}

// TestRequestNamespaceAllocates nothing: every controller request goes through it.
func TestRequestNamespaceAllocatesNothing(t *testing.T) {
	for _, path := range []string{"/apis/apps/v1/namespaces/ns-1/deployments/d", "/api/v1/namespaces/ns-1/finalize", "/api/v1/nodes/n"} {
		if n := testing.AllocsPerRun(100, func() { RequestNamespace(path) }); n != 0 {
			t.Errorf("RequestNamespace(%q) allocates %v times, want 0", path, n)
		}
	}
}
