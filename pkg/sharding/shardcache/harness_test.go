package shardcache

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corelisters "k8s.io/client-go/listers/core/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// testPartition maps "pN-…" namespaces to partition N and everything else to 99.
func testPartition(ns string) partition.ID {
	if strings.HasPrefix(ns, "p") {
		if i := strings.IndexByte(ns, '-'); i > 1 {
			if n, err := strconv.Atoi(ns[1:i]); err == nil {
				return partition.ID(n)
			}
		}
	}
	return 99
}

// cm builds a config map "ns/name" at resourceVersion rv, with managedFields set so that
// tests can see them stripped.
// rv 0 leaves the resourceVersion empty, as the fake clientset does.
func cm(ns, name string, rv int) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "test"}},
	}}
	if rv != 0 {
		c.ResourceVersion = strconv.Itoa(rv)
	}
	return c
}

// upstream is a controllable watch: send blocks until the feed has received the event.
type upstream struct {
	t    *testing.T
	ch   chan watch.Event
	once sync.Once
	stop chan struct{}
	opts metav1.ListOptions
}

func (u *upstream) ResultChan() <-chan watch.Event { return u.ch }
func (u *upstream) Stop()                          { u.once.Do(func() { close(u.stop) }) }

func (u *upstream) send(typ watch.EventType, obj runtime.Object) {
	u.t.Helper()
	select {
	case u.ch <- watch.Event{Type: typ, Object: obj}:
	case <-time.After(5 * time.Second):
		u.t.Errorf("feed did not take %s %s", typ, describe(obj))
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: it bounds only a failure, and covers the reflector's backoff before a
	// relist (up to 1.6 s) on a loaded machine.
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitHWM waits until the feed has accounted for upstream resourceVersion rv.
func waitHWM(t *testing.T, f *feed, rv uint64) {
	t.Helper()
	waitFor(t, "high-water mark", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.newestLocked() >= rv
	})
}

// fakeAPI serves a feed: cluster and namespace lists from canned results, and watches as
// upstreams the test drives.
type fakeAPI struct {
	t         *testing.T
	mu        sync.Mutex
	lists     map[string]*corev1.ConfigMapList // by namespace; "" is the cluster
	listCalls []string
	listOpts  []metav1.ListOptions
	// calls logs every call in order: "list ns" ("list *" for the cluster) and "watch rv".
	calls    []string
	watches  []*upstream
	watchErr error
	// serverFilter makes cluster-wide lists honour ListOptions.ShardSelector, as an
	// apiserver with the ShardedListAndWatch gate does (watches are filtered by emit).
	serverFilter bool
	// beforeList, if set, runs before every list, outside the lock: it may block.
	beforeList func(namespace string, opts metav1.ListOptions)
	// failList, if set, is asked (under the lock) before every list: a non-nil error
	// fails the list request (which is still recorded).
	failList func(namespace string, opts metav1.ListOptions) error
	// failWatch, if set, is asked (under the lock) before every watch: a non-nil error
	// fails the watch request, which is then not recorded.
	failWatch func(opts metav1.ListOptions) error
}

func (a *fakeAPI) setList(ns string, rv int, items ...*corev1.ConfigMap) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv)}}
	for _, it := range items {
		l.Items = append(l.Items, *it)
	}
	a.lists[ns] = l
}

func (a *fakeAPI) resourceType() ResourceType {
	return ResourceType{
		Resource: corev1.SchemeGroupVersion.WithResource("configmaps"),
		Object:   &corev1.ConfigMap{},
		List: func(_ context.Context, _ kubernetes.Interface, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			if a.beforeList != nil {
				a.beforeList(ns, opts)
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.listCalls = append(a.listCalls, ns)
			a.listOpts = append(a.listOpts, opts)
			a.calls = append(a.calls, "list "+cmp.Or(ns, "*"))
			if a.failList != nil {
				if err := a.failList(ns, opts); err != nil {
					return nil, err
				}
			}
			key := ns
			if opts.Continue != "" {
				key += "|" + opts.Continue
			}
			l, ok := a.lists[key]
			if !ok {
				return nil, fmt.Errorf("no list for namespace %q", ns)
			}
			l = l.DeepCopy()
			if a.serverFilter && opts.ShardSelector != "" {
				kept := l.Items[:0]
				for _, it := range l.Items {
					if covers, err := selectorCovers(opts.ShardSelector, it.Namespace); err != nil {
						return nil, err
					} else if covers {
						kept = append(kept, it)
					}
				}
				l.Items = kept
			}
			return l, nil
		},
		Watch: func(_ context.Context, _ kubernetes.Interface, _ string, opts metav1.ListOptions) (watch.Interface, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.watchErr != nil {
				return nil, a.watchErr
			}
			if a.failWatch != nil {
				if err := a.failWatch(opts); err != nil {
					a.calls = append(a.calls, "watch "+opts.ResourceVersion+" failed")
					return nil, err
				}
			}
			a.calls = append(a.calls, "watch "+opts.ResourceVersion)
			u := &upstream{t: a.t, ch: make(chan watch.Event), stop: make(chan struct{}), opts: opts}
			a.watches = append(a.watches, u)
			return u, nil
		},
	}
}

// emit sends an event on the newest watch if its selector covers the object's namespace,
// as a server-side filtering apiserver would, and reports whether it did.
func (a *fakeAPI) emit(typ watch.EventType, obj *corev1.ConfigMap) bool {
	a.t.Helper()
	u := a.lastWatch()
	if covers, err := selectorCovers(u.opts.ShardSelector, obj.Namespace); err != nil {
		a.t.Fatal(err)
	} else if !covers {
		return false
	}
	u.send(typ, obj)
	return true
}

func (a *fakeAPI) watchCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.watches)
}

func (a *fakeAPI) lastWatch() *upstream {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.watches[len(a.watches)-1]
}

// newTestFeed returns a feed over a fakeAPI, with partitions admitted.
func newTestFeed(t *testing.T, partitions ...partition.ID) (*feed, *fakeAPI) {
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	adm := newAdmission(testPartition)
	adm.update(partitions, true)
	return newFeed(api.resourceType(), nil, adm, false, klog.Background()), api
}

// reflect drives the feed like client-go's reflector: list, then watch from the list's
// resourceVersion. It returns the listed objects and the watch.
func reflectList(t *testing.T, f *feed) ([]string, watch.Interface) {
	t.Helper()
	list, err := f.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		out = append(out, describe(it))
	}
	lm, _ := meta.ListAccessor(list)
	w, err := f.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	return out, w
}

func watchList(t *testing.T, f *feed) watch.Interface {
	t.Helper()
	w, err := f.WatchWithContext(context.Background(), metav1.ListOptions{
		SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		t.Fatalf("watch-list: %v", err)
	}
	return w
}

// describe renders an object as "ns/name@rv".
func describe(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	key := m.GetName()
	if m.GetNamespace() != "" {
		key = m.GetNamespace() + "/" + key
	}
	if key == "" {
		return "@" + m.GetResourceVersion()
	}
	return key + "@" + m.GetResourceVersion()
}

func describeEvent(ev watch.Event) string {
	return string(ev.Type) + " " + describe(ev.Object)
}

// drain reads events until none arrives for quiet.
func drain(t *testing.T, w watch.Interface, quiet time.Duration) []string {
	t.Helper()
	var out []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetManagedFields() != nil {
				t.Errorf("event %s still has managedFields", describeEvent(ev))
			}
			out = append(out, describeEvent(ev))
		case <-time.After(quiet):
			return out
		}
	}
}

// take reads exactly n events.
func take(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", out)
			}
			out = append(out, describeEvent(ev))
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d of %d events: %v", len(out), n, out)
		}
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// configMapLister is the typed lister of c's ConfigMap informer.
func configMapLister(c *Cache) corelisters.ConfigMapLister {
	return corelisters.NewConfigMapLister(c.InformerFor(ConfigMaps).GetIndexer())
}

// createCached creates ConfigMap namespace/name through client and waits until c caches it.
func createCached(t *testing.T, ctx context.Context, client kubernetes.Interface, c *Cache, namespace, name string) {
	t.Helper()
	if _, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, cm(namespace, name, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, namespace+"/"+name+" cached", func() bool {
		_, err := configMapLister(c).ConfigMaps(namespace).Get(name)
		return err == nil
	})
}

// startedConfigMapCache returns a started cache over client with a ConfigMap informer,
// its first list synced (opts.PollInterval defaults to 5ms here).
func startedConfigMapCache(t *testing.T, ctx context.Context, client kubernetes.Interface, opts Options) *Cache {
	t.Helper()
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	c, err := New(client, testPartition, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
