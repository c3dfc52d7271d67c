package garbagecollector

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kshard/kshard/pkg/controllers"
)

// BenchmarkResyncQueued measures the heap that Resync's queued work holds per cached
// object until the graph builder applies it. A shard that starts acquires every
// partition it warmed at once, at Ready, and that is when its heap, and so its peak RSS,
// is highest (docs/performance.md, "Where the 4-shard peak is set"). The queue here has
// no metrics provider; the shard's adds one timestamp per queued item on top.
func BenchmarkResyncQueued(b *testing.B) {
	const namespaces, perNamespace = 500, 10
	f := buildFixture(b, conservativeRemote{}, nil)
	store := f.informers[pods.GroupVersionResource].GetStore()
	scopes := make([]controllers.Scope, 0, namespaces)
	for i := range namespaces {
		ns := fmt.Sprintf("lc-%05d", i)
		scopes = append(scopes, controllers.Scope{Namespaces: []string{ns}})
		for j := range perNamespace {
			name := fmt.Sprintf("app-0-5d8f7c9b4-%05d", i*perNamespace+j)
			if err := store.Add(object(pods, ns, name, "uid-"+name)); err != nil {
				b.Fatal(err)
			}
		}
	}
	var held int64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, s := range scopes {
			f.ctrl.Resync(s)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held += int64(after.HeapAlloc) - int64(before.HeapAlloc)
		b.StopTimer()
		f.drainGraph()
		b.StartTimer()
	}
	b.ReportMetric(float64(held)/float64(b.N)/(namespaces*perNamespace), "queued-B/object")
}
