package endpointslice

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// managedBy is the EndpointSlice controller's managed-by label value (upstream's and
// kshard's alike).
const managedBy = "endpointslice-controller.k8s.io"

// sliceWatch watches the managed EndpointSlices of the benchmark's namespaces: what each
// pod's readiness is in them, the flips not yet seen, the time each flip took to show,
// and how many slice writes it saw.
type sliceWatch struct {
	prefix string // of the benchmark's namespaces

	mu        sync.Mutex
	seen      map[string]bool // pod key -> readiness in the slices
	flips     map[string]flip // pod key -> flip not seen yet
	latencies []time.Duration
	writes    int // slice creates, updates and deletes seen
}

// watchSlices starts the watch and waits until it has listed.
func watchSlices(b *testing.B, client kubernetes.Interface, prefix string) *sliceWatch {
	b.Helper()
	w := &sliceWatch{prefix: prefix, seen: map[string]bool{}, flips: map[string]flip{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = discoveryv1.LabelManagedBy + "=" + managedBy
	}))
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.observe(obj, true) },
		UpdateFunc: func(old, cur any) {
			if old.(*discoveryv1.EndpointSlice).ResourceVersion != cur.(*discoveryv1.EndpointSlice).ResourceVersion {
				w.observe(cur, true)
			}
		},
		DeleteFunc: func(obj any) { w.observe(obj, false) },
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the EndpointSlice watch never synced")
	}
	return w
}

func (w *sliceWatch) observe(obj any, present bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || !strings.HasPrefix(s.Namespace, w.prefix) {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if !present {
		return // a pod leaves a slice only with a rebalance into another one
	}
	for _, ep := range s.Endpoints {
		if ep.TargetRef == nil {
			continue
		}
		key := s.Namespace + "/" + ep.TargetRef.Name
		ready := ep.Conditions.Ready != nil && *ep.Conditions.Ready
		w.seen[key] = ready
		if f, ok := w.flips[key]; ok && f.ready == ready {
			w.latencies = append(w.latencies, now.Sub(f.at))
			delete(w.flips, key)
		}
	}
}

// expect records a flip about to be sent.
func (w *sliceWatch) expect(key string, f flip) {
	w.mu.Lock()
	w.flips[key] = f
	w.mu.Unlock()
}

// cancel forgets a flip that was not made (its request failed).
func (w *sliceWatch) cancel(key string) {
	w.mu.Lock()
	delete(w.flips, key)
	w.mu.Unlock()
}

func (w *sliceWatch) pending(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.flips[key]
	return ok
}

// counters returns the writes seen and the flips not yet seen.
func (w *sliceWatch) counters() (writes, unseen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, len(w.flips)
}

// takeLatencies returns the flip latencies recorded since the last call.
func (w *sliceWatch) takeLatencies() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.latencies
	w.latencies = nil
	return out
}

// diff returns how many pods the slices show otherwise than want, and one of them.
func (w *sliceWatch) diff(want map[string]bool) (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, example := 0, ""
	for k, v := range want {
		if got, ok := w.seen[k]; !ok || got != v {
			if n == 0 {
				example = fmt.Sprintf("%s: want ready=%v, slices show %v (listed: %v)", k, v, got, ok)
			}
			n++
		}
	}
	return n, example
}

// dropUnseen forgets the flips not seen yet (after a phase's drain gave up on them) and
// returns how many there were.
func (w *sliceWatch) dropUnseen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.flips)
	w.flips = map[string]flip{}
	return n
}
