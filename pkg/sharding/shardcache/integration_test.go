//go:build integration

package shardcache

// Integration test against a real kube-apiserver (it reads package internals, so it lives
// here rather than under test/). It is built only with the "integration" tag, which
// `make test-integration` sets, and then it fails without an apiserver:
//
//	hack/cluster.sh up
//	KSHARD_KUBECONFIG=$(hack/cluster.sh env | sed -n 's/^KUBECONFIG=//p') \
//	  go test -tags integration -race -run Integration -v ./pkg/sharding/shardcache/
//
// It creates its own namespaces (prefix kshard-cache-it-<random>) and deletes them.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// requestLog counts the cache's list and watch requests by path, and injects faults
// into cluster-wide config map watches: it can cut the running ones and fail the next
// ones with 410 Gone, which makes client-go's reflector relist.
type requestLog struct {
	mu      sync.Mutex
	reqs    []string // "list /api/v1/namespaces/x/configmaps", "watch /api/v1/configmaps", …
	bodies  []*cuttableBody
	fail410 int
}

// cuttableBody is a watch response body the test can end as if the server had closed the
// watch normally (io.EOF), which makes the reflector watch again without relisting.
type cuttableBody struct {
	io.ReadCloser
	mu  sync.Mutex
	cut bool
}

func (b *cuttableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.mu.Lock()
		cut := b.cut
		b.mu.Unlock()
		if cut {
			return n, io.EOF
		}
	}
	return n, err
}

func (b *cuttableBody) end() {
	b.mu.Lock()
	b.cut = true
	b.mu.Unlock()
	_ = b.ReadCloser.Close()
}

const cmWatchPath = "/api/v1/configmaps"

type countingTransport struct {
	log  *requestLog
	next http.RoundTripper
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return c.next.RoundTrip(req)
	}
	kind := "list"
	watching := req.URL.Query().Get("watch") == "true"
	if watching {
		kind = "watch"
	}
	l := c.log
	l.mu.Lock()
	l.reqs = append(l.reqs, kind+" "+req.URL.Path)
	if watching && req.URL.Path == cmWatchPath && l.fail410 > 0 {
		l.fail410--
		l.mu.Unlock()
		body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test","reason":"Expired","code":410}`
		return &http.Response{
			StatusCode: http.StatusGone, Status: "410 Gone", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": []string{"application/json"}},
			Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
		}, nil
	}
	l.mu.Unlock()
	resp, err := c.next.RoundTrip(req)
	if err == nil && watching && req.URL.Path == cmWatchPath {
		b := &cuttableBody{ReadCloser: resp.Body}
		resp.Body = b
		l.mu.Lock()
		l.bodies = append(l.bodies, b)
		l.mu.Unlock()
	}
	return resp, err
}

// cutWatches ends the running cluster-wide config map watches (cleanly, as a server
// does when a watch times out) and makes the next fail410 of them fail with 410 Gone.
func (l *requestLog) cutWatches(fail410 int) {
	l.mu.Lock()
	bodies := l.bodies
	l.bodies = nil
	l.fail410 = fail410
	l.mu.Unlock()
	for _, b := range bodies {
		b.end()
	}
}

func (l *requestLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = nil
}

// count returns the number of requests of kind ("list" or "watch") on resource, split
// into cluster-wide and namespace-scoped ones.
func (l *requestLog) count(kind, resource string) (cluster, namespaced int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reqs {
		k, path, _ := strings.Cut(r, " ")
		if k != kind || !strings.HasSuffix(path, "/"+resource) {
			continue
		}
		if strings.Contains(path, "/namespaces/") {
			namespaced++
		} else {
			cluster++
		}
	}
	return cluster, namespaced
}

// itEnv is one run of the integration test: its namespaces and clients.
type itEnv struct {
	t      *testing.T
	admin  kubernetes.Interface // the test's own calls, not counted
	prefix string
	layout map[partition.ID][]string // partition → namespaces
}

func (e *itEnv) partitionOf(ns string) partition.ID {
	rest, ok := strings.CutPrefix(ns, e.prefix+"-p")
	if !ok {
		return 1000 // never admitted: every other namespace of the cluster
	}
	n, _, _ := strings.Cut(rest, "-")
	p, err := strconv.Atoi(n)
	if err != nil {
		return 1000
	}
	return partition.ID(p)
}

func (e *itEnv) namespaces(partitions ...partition.ID) []string {
	var out []string
	for _, p := range partitions {
		out = append(out, e.layout[p]...)
	}
	return out
}

// truth lists resource in the namespaces of partitions: key → resourceVersion.
func (e *itEnv) truth(ctx context.Context, resource string, partitions ...partition.ID) map[string]uint64 {
	e.t.Helper()
	out := map[string]uint64{}
	for _, ns := range e.namespaces(partitions...) {
		var names map[string]string
		switch resource {
		case "configmaps":
			l, err := e.admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				e.t.Fatal(err)
			}
			names = map[string]string{}
			for _, o := range l.Items {
				names[o.Name] = o.ResourceVersion
			}
		case "secrets":
			l, err := e.admin.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				e.t.Fatal(err)
			}
			names = map[string]string{}
			for _, o := range l.Items {
				names[o.Name] = o.ResourceVersion
			}
		}
		for name, rv := range names {
			v, _ := parseRV(rv)
			out[ns+"/"+name] = v
		}
	}
	return out
}

// stored returns the informer's store: key → resourceVersion.
func stored(inf toolscache.SharedIndexInformer) map[string]uint64 {
	out := map[string]uint64{}
	for _, o := range inf.GetStore().List() {
		k, _ := toolscache.MetaNamespaceKeyFunc(o)
		v, _ := objectRV(o)
		out[k] = v
	}
	return out
}

// diff describes how got differs from want (empty when equal).
func diff(got, want map[string]uint64) string {
	var d []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			d = append(d, "missing "+k)
		case g != v:
			d = append(d, fmt.Sprintf("stale %s@%d want @%d", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("… %d more", len(d)-10))
	}
	return strings.Join(d, ", ")
}

// eventually waits until the store of inf equals want() exactly.
func (e *itEnv) eventually(ctx context.Context, what string, inf toolscache.SharedIndexInformer, want func() map[string]uint64) {
	e.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = diff(stored(inf), want())
		return last == "", nil
	})
	if err != nil {
		e.t.Fatalf("%s: store never matched the apiserver: %s", what, last)
	}
}

// monitor watches a controller's view through an event handler: per-object
// resourceVersions must never go backwards, and it counts adds and deletes.
type monitor struct {
	mu          sync.Mutex
	regressions []string
	adds        map[partition.ID]int
	deletes     map[partition.ID]int
	partitionOf PartitionFunc
}

func (m *monitor) handler() toolscache.ResourceEventHandler {
	part := func(obj any) partition.ID {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		key, _, _ := objectKeys(obj)
		return m.partitionOf(key)
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.adds[part(obj)]++
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, _ := objectRV(oldObj)
			n, _ := objectRV(newObj)
			if n < o {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.regressions = append(m.regressions, fmt.Sprintf("%s %d→%d", keyOf(newObj), o, n))
			}
		},
		DeleteFunc: func(obj any) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.deletes[part(obj)]++
		},
	}
}

func (m *monitor) get() (regressions []string, adds, deletes map[partition.ID]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	adds, deletes = map[partition.ID]int{}, map[partition.ID]int{}
	for k, v := range m.adds {
		adds[k] = v
	}
	for k, v := range m.deletes {
		deletes[k] = v
	}
	return append([]string(nil), m.regressions...), adds, deletes
}

func TestIntegration(t *testing.T) {
	kubeconfig := os.Getenv("KSHARD_KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("KSHARD_KUBECONFIG is not set: this test needs a real apiserver (see the top of this file)")
	}
	for _, mode := range []struct {
		name             string
		disableWatchList bool
	}{
		{name: "watchlist", disableWatchList: false},
		{name: "classic list+watch", disableWatchList: true},
	} {
		t.Run(mode.name, func(t *testing.T) { runIntegration(t, kubeconfig, mode.disableWatchList) })
	}
}

func runIntegration(t *testing.T, kubeconfig string, disableWatchList bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	admin := kubernetes.NewForConfigOrDie(cfg)
	reqs := &requestLog{}
	counted := rest.CopyConfig(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{log: reqs, next: rt} })
	client := kubernetes.NewForConfigOrDie(counted)

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	e := &itEnv{t: t, admin: admin, prefix: "kshard-cache-it-" + hex.EncodeToString(suffix), layout: map[partition.ID][]string{}}
	for p, names := range map[partition.ID][]string{0: {"a", "b"}, 1: {"a", "b", "c"}, 2: {"a", "b"}, 3: {"a"}} {
		for _, n := range names {
			e.layout[p] = append(e.layout[p], fmt.Sprintf("%s-p%d-%s", e.prefix, p, n))
		}
	}
	const perNamespace = 30
	e.setup(ctx, perNamespace)

	c, err := New(client, e.partitionOf, Options{DisableWatchList: disableWatchList, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cms := c.InformerFor(ConfigMaps)
	secrets := c.InformerFor(Secrets)
	c.InformerFor(Pods) // cluster pods of other namespaces exercise the filter
	mon := &monitor{adds: map[partition.ID]int{}, deletes: map[partition.ID]int{}, partitionOf: e.partitionOf}
	if _, err := cms.AddEventHandler(mon.handler()); err != nil {
		t.Fatal(err)
	}

	// 1. Prepare before Start: admission only; the first filtered list fills the store.
	if err := c.Prepare(ctx, []partition.ID{0}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c.Start(runCtx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually(ctx, "start", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0) })
	e.eventually(ctx, "start", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0) })
	if n := len(c.InformerFor(Pods).GetStore().ListKeys()); n != 0 {
		t.Errorf("pods of partitions that are not admitted are cached: %d", n)
	}
	cl, _ := reqs.count("list", "configmaps")
	cw, _ := reqs.count("watch", "configmaps")
	t.Logf("start: configmaps cluster-wide lists=%d watches=%d; cached %v", cl, cw, c.CachedObjects())

	// 2. Prepare a partition while the watches run: namespace-scoped lists only.
	before1 := e.truth(ctx, "configmaps", 1)
	rvBefore, _ := parseRV(cms.LastSyncResourceVersion())
	reqs.reset()
	start := time.Now()
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	got := stored(cms)
	for k, rv := range before1 {
		if g, ok := got[k]; !ok || g < rv {
			t.Errorf("Prepare(1) returned before %s@%d was in the store (have %d, %v)", k, rv, g, ok)
		}
	}
	var totalNS int
	for _, res := range []string{"configmaps", "secrets", "pods"} {
		cluster, namespaced := reqs.count("list", res)
		totalNS += namespaced
		if cluster != 0 {
			t.Errorf("Prepare(1) listed %s cluster-wide %d times", res, cluster)
		}
		if want := len(e.layout[1]); namespaced != want {
			t.Errorf("Prepare(1) made %d namespace-scoped %s lists, want %d", namespaced, res, want)
		}
	}
	if rvAfter, _ := parseRV(cms.LastSyncResourceVersion()); rvAfter < rvBefore {
		t.Errorf("the reflector's resourceVersion went back from %d to %d", rvBefore, rvAfter)
	}
	t.Logf("Prepare(1) of %d namespaces × 3 resources: %d namespace-scoped lists, 0 cluster-wide, %v; cached %v",
		len(e.layout[1]), totalNS, took.Round(time.Millisecond), c.CachedObjects())
	e.eventually(ctx, "prepare 1", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1) })
	e.eventually(ctx, "prepare 1", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0, 1) })

	// 3. Prepare a partition while its objects change: before, during and after the
	// warm-up lists (the hook writes between a list and its merge, so those events are
	// buffered with resourceVersions above the list's).
	p2 := map[string]bool{}
	for _, ns := range e.layout[2] {
		p2[ns] = true
	}
	var hookMu sync.Mutex
	hooked := map[string]bool{}
	c.hooks.afterNamespaceList = func(resource, ns string) {
		if resource != "configmaps" || !p2[ns] {
			return
		}
		hookMu.Lock()
		defer hookMu.Unlock()
		hooked[ns] = true
		if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-0"}, Data: map[string]string{"during": "warm-up"},
		}, metav1.UpdateOptions{}); err != nil {
			t.Errorf("hook update: %v", err)
		}
		if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-1", metav1.DeleteOptions{}); err != nil {
			t.Errorf("hook delete: %v", err)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "during-warmup"},
		}, metav1.CreateOptions{}); err != nil {
			t.Errorf("hook create: %v", err)
		}
	}
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan int)
	go func() { churned <- e.churn(churnCtx, e.layout[2]) }()
	time.Sleep(300 * time.Millisecond)
	if err := c.Prepare(ctx, []partition.ID{2}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stopChurn()
	writes := <-churned
	hookMu.Lock()
	for ns := range p2 {
		if !hooked[ns] {
			t.Errorf("the warm-up hook did not run for %s", ns)
		}
	}
	hookMu.Unlock()
	e.eventually(ctx, "prepare 2 under churn", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1, 2) })
	e.eventually(ctx, "prepare 2 under churn", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0, 1, 2) })
	for ns := range p2 {
		o, err := configMapLister(c).ConfigMaps(ns).Get("cm-0")
		if err != nil || o.Data["during"] != "warm-up" {
			t.Errorf("%s/cm-0: the update made during the warm-up is missing (%v)", ns, err)
		}
		if _, err := configMapLister(c).ConfigMaps(ns).Get("cm-1"); !apierrors.IsNotFound(err) {
			t.Errorf("%s/cm-1: deleted during the warm-up but still cached", ns)
		}
		if _, err := configMapLister(c).ConfigMaps(ns).Get("during-warmup"); err != nil {
			t.Errorf("%s/during-warmup: created during the warm-up but not cached", ns)
		}
	}
	t.Logf("Prepare(2) under churn: %d concurrent writes plus 3 per namespace between list and merge; cached %v", writes, c.CachedObjects())

	// 3b. A watch restart without relist: the new watch resumes from the feed's
	// high-water mark and replayed events are dropped.
	c.hooks.afterNamespaceList = nil
	c.mu.Lock()
	cmFeed := c.feeds[ConfigMaps.Key()]
	c.mu.Unlock()
	epochOf := func() (uint64, bool) {
		cmFeed.mu.Lock()
		defer cmFeed.mu.Unlock()
		return cmFeed.epoch, cmFeed.listing
	}
	epochBefore, _ := epochOf()
	watchesBefore, _ := reqs.count("watch", "configmaps")
	reqs.cutWatches(0)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, _ := reqs.count("watch", "configmaps")
		return n > watchesBefore, nil
	}); err != nil {
		t.Fatal("the reflector did not watch again after its watch was cut")
	}
	for _, ns := range e.layout[0] {
		if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-5"}, Data: map[string]string{"after": "restart"},
		}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.eventually(ctx, "watch restart", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1, 2) })
	if epoch, _ := epochOf(); epoch != epochBefore {
		t.Errorf("a clean watch restart caused a relist (epoch %d→%d)", epochBefore, epoch)
	}

	// 3c. A relist while a warm-up is between its list and its merge: the relist covers
	// the partition, the (now stale) list is not merged.
	clusterListsBefore, _ := reqs.count("list", "configmaps")
	relisted := false
	c.hooks.afterNamespaceList = func(resource, ns string) {
		if resource != "configmaps" || e.partitionOf(ns) != 3 {
			return
		}
		// The list just taken is now older than the apiserver.
		if _, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-0"}, Data: map[string]string{"after": "list"},
		}, metav1.UpdateOptions{}); err != nil {
			t.Errorf("hook update: %v", err)
		}
		epoch, _ := epochOf()
		reqs.cutWatches(1)
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			now, listing := epochOf()
			return now > epoch && !listing, nil
		})
		if err != nil {
			t.Errorf("the reflector did not relist after a 410")
		}
		relisted = true
	}
	syntheticBefore := cmFeed.counters.synthetic.Load()
	if err := c.Prepare(ctx, []partition.ID{3}); err != nil {
		t.Fatal(err)
	}
	if !relisted {
		t.Fatal("the relist hook did not run")
	}
	for k, rv := range e.truth(ctx, "configmaps", 3) {
		if got, ok := stored(cms)[k]; !ok || got < rv {
			t.Errorf("after a relist during the warm-up, Prepare(3) returned without %s@%d (have %d)", k, rv, got)
		}
	}
	e.eventually(ctx, "relist during warm-up", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1, 2, 3) })
	clusterListsAfter, _ := reqs.count("list", "configmaps")
	t.Logf("relist during warm-up: cluster-wide configmap lists %d→%d, synthetic events for the merge: %d (subsumed)",
		clusterListsBefore, clusterListsAfter, cmFeed.counters.synthetic.Load()-syntheticBefore)
	if n := cmFeed.counters.synthetic.Load() - syntheticBefore; n != 0 {
		t.Errorf("the subsumed warm-up still injected %d events", n)
	}

	// 4. resourceVersions: no object went back in time, and the reflector and the store
	// are not behind any object they hold.
	regressions, adds, _ := mon.get()
	if len(regressions) > 0 {
		t.Errorf("objects went back in time: %v", regressions)
	}
	var newest uint64
	for _, rv := range stored(cms) {
		newest = max(newest, rv)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r, _ := parseRV(cms.LastSyncResourceVersion())
		s, _ := parseRV(cms.GetIndexer().LastStoreSyncResourceVersion())
		return r >= newest && (s == 0 || s >= newest), nil
	})
	if err != nil {
		t.Errorf("reflector at %s, store at %s, behind the newest cached object %d",
			cms.LastSyncResourceVersion(), cms.GetIndexer().LastStoreSyncResourceVersion(), newest)
	}

	// 5. Release: handlers see a delete for every object, the store empties.
	c.hooks.afterNamespaceList = nil
	want1 := len(e.truth(ctx, "configmaps", 1))
	if err := c.Release(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	for k := range stored(cms) {
		if e.partitionOf(strings.Split(k, "/")[0]) == 1 {
			t.Errorf("Release(1) returned with %s still cached", k)
		}
	}
	for k := range stored(secrets) {
		if e.partitionOf(strings.Split(k, "/")[0]) == 1 {
			t.Errorf("Release(1) returned with secret %s still cached", k)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, _, deletes := mon.get()
		return deletes[1] == want1, nil
	})
	_, _, deletes := mon.get()
	if err != nil {
		t.Errorf("handlers saw %d deletes for partition 1, want %d", deletes[1], want1)
	}
	e.eventually(ctx, "release 1", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 2, 3) })
	t.Logf("Release(1): %d configmap deletes seen by handlers (adds seen per partition %v); cached %v",
		deletes[1], adds, c.CachedObjects())

	// 6. Many namespaces at once (Options.ClusterListThreshold below the 9 lists that
	// preparing partition 1 again takes): cluster-wide warm-up lists, one per type,
	// instead of namespace lists, under churn and with writes between the list and its
	// merge; Prepare returns only once the objects are cached, and the informers do not
	// relist.
	c.opts.ClusterListThreshold = 2
	bulkLists := func() (n uint64) {
		for _, s := range c.Stats() {
			n += s.BulkLists
		}
		return n
	}
	bulkBefore := bulkLists()
	epochBefore, _ = epochOf()
	churnCtx, stopChurn = context.WithCancel(ctx)
	go func() { churned <- e.churn(churnCtx, e.layout[1]) }()
	time.Sleep(200 * time.Millisecond)
	before1 = e.truth(ctx, "configmaps", 1)
	reqs.reset()
	start = time.Now()
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	got = stored(cms)
	for k, rv := range before1 {
		if g, ok := got[k]; !ok || g < rv {
			t.Errorf("Prepare(1) by cluster-wide lists returned before %s@%d was in the store (have %d, %v)", k, rv, g, ok)
		}
	}
	stopChurn()
	writes = <-churned
	var nsLists, clusterLists int
	for _, res := range []string{"configmaps", "secrets", "pods"} {
		cl, nl := reqs.count("list", res)
		clusterLists += cl
		nsLists += nl
	}
	// One warm-up of 9 namespace lists crosses the threshold before it lists anything.
	if n := bulkLists() - bulkBefore; nsLists != 0 || n < 3 || uint64(clusterLists) != n {
		t.Errorf("Prepare(1) above the threshold: %d namespace lists, %d cluster-wide lists, %d of them warm-up lists; want only warm-up lists, at least one per type",
			nsLists, clusterLists, n)
	}
	if epoch, _ := epochOf(); epoch != epochBefore {
		t.Errorf("the cluster-wide warm-up made the informer relist (epoch %d→%d)", epochBefore, epoch)
	}
	e.eventually(ctx, "cluster-wide warm-up", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1, 2, 3) })
	e.eventually(ctx, "cluster-wide warm-up", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0, 1, 2, 3) })
	if regressions, _, _ := mon.get(); len(regressions) > 0 {
		t.Errorf("objects went back in time across the cluster-wide warm-up: %v", regressions)
	}
	t.Logf("Prepare(1) above the threshold under churn (%d writes): %d cluster-wide warm-up lists, %d namespace lists, %v",
		writes, bulkLists()-bulkBefore, nsLists, took.Round(time.Millisecond))

	for _, s := range c.Stats() {
		t.Logf("stats %s: objects=%d clusterLists=%d namespaceLists=%d bulkLists=%d watches=%d dropped=%d synthetic=%d",
			s.Resource, s.Objects, s.ClusterLists, s.NamespaceLists, s.BulkLists, s.Watches, s.DroppedObjects, s.SyntheticEvents)
	}
}

// setup creates the namespaces with perNamespace config maps and a third as many secrets
// each, and registers their deletion.
func (e *itEnv) setup(ctx context.Context, perNamespace int) {
	t := e.t
	all := e.namespaces(0, 1, 2, 3)
	t.Cleanup(func() { e.cleanup(all) })
	var wg sync.WaitGroup
	errs := make(chan error, len(all))
	for _, ns := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			for i := 0; i < perNamespace; i++ {
				if _, err := e.admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"i": strconv.Itoa(i)},
				}, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)},
					}, metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("setup: %v", err)
	}
}

// churn updates, creates and deletes config maps in namespaces until ctx ends and
// returns the number of writes.
func (e *itEnv) churn(ctx context.Context, namespaces []string) int {
	writes := 0
	for i := 0; ctx.Err() == nil; i++ {
		ns := namespaces[i%len(namespaces)]
		cms := e.admin.CoreV1().ConfigMaps(ns)
		var err error
		switch i % 3 {
		case 0:
			_, err = cms.Update(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", 2+i%20)},
				Data:       map[string]string{"churn": strconv.Itoa(i)},
			}, metav1.UpdateOptions{})
		case 1:
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)}}, metav1.CreateOptions{})
		case 2:
			err = cms.Delete(ctx, fmt.Sprintf("churn-%d", i-4), metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				err = nil
			}
		}
		if err != nil && ctx.Err() == nil {
			e.t.Errorf("churn: %v", err)
		}
		if err == nil {
			writes++
		}
		time.Sleep(2 * time.Millisecond)
	}
	return writes
}

// cleanup deletes the test namespaces. Their content goes first; a namespace that is
// not gone within 2 s (together) is then finalized: on the default test cluster no
// namespace controller runs for this test (kube-controller-manager leaves `namespace` to
// kshard, and no kshard runs here), and waiting 20 s per namespace for one cost a minute
// per test. A cluster whose kube-controller-manager runs it still finishes them itself.
func (e *itEnv) cleanup(namespaces []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range namespaces {
		_ = e.admin.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = e.admin.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err := e.admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Logf("cleanup: delete namespace %s: %v", ns, err)
		}
	}
	left := func() []*corev1.Namespace {
		var out []*corev1.Namespace
		for _, ns := range namespaces {
			if n, err := e.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		return len(left()) == 0, nil
	})
	for _, n := range left() {
		n.Spec.Finalizers = nil
		if _, err := e.admin.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Logf("cleanup: finalize namespace %s: %v", n.Name, err)
		}
	}
}
