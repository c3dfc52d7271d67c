package replicaset

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
)

// TestSyncWaitsForItsOwnWrites: a sync right after one that created pods does nothing
// until the pod cache has reached the creates' resourceVersion.
func TestSyncWaitsForItsOwnWrites(t *testing.T) {
	rs := newRS("rs", 2)
	// The pod cache is at resourceVersion 10 (an unrelated pod).
	f := newFixture(t, rs, newPodOf("unrelated", nil, rv("10"), labelled(map[string]string{"x": "y"})))
	var created atomic.Int32
	f.Client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		pod.Name = fmt.Sprintf("%s%d", pod.GenerateName, created.Add(1))
		pod.ResourceVersion = "50"
		return true, pod, nil
	})
	f.MustSync("ns/rs")
	var stale *consistency.StaleError
	if err := f.Sync("ns/rs"); !errors.As(err, &stale) || stale.Resource != podsResource {
		t.Fatalf("second sync = %v, want a stale pod cache", err)
	}
	f.Cache(newPodOf("later", nil, rv("50"), labelled(map[string]string{"x": "y"})))
	if err := f.Sync("ns/rs"); err != nil {
		t.Fatalf("sync once the cache caught up = %v", err)
	}
}
