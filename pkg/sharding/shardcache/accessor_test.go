package shardcache

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	nodesKey   = Key{Resource: corev1.SchemeGroupVersion.WithResource("nodes")}
	widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func widget(ns, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
	}
}

// newAccessorCache returns a started cache with partition 1 prepared, over a cluster with
// nodes, config maps and (metadata-only) widgets in p1-a and other.
func newAccessorCache(t *testing.T) *Cache {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := fake.NewClientset(ns("p1-a"), ns("other"), node("n1"), node("n2"), cm("p1-a", "x", 0), cm("other", "o", 0))
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mc := metadatafake.NewSimpleMetadataClient(scheme, widget("p1-a", "w1"), widget("other", "w2"))
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(widgetsGVR.GroupVersion().WithKind("Widget"), meta.RESTScopeNamespace)
	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond, MetadataClient: mc, RESTMapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{ConfigMaps.Key(), nodesKey, {Resource: widgetsGVR, Metadata: true}} {
		if _, err := c.Informer(k); err != nil {
			t.Fatalf("Informer(%s): %v", k, err)
		}
	}
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInformerAccessor(t *testing.T) {
	c := newAccessorCache(t)
	tests := []struct {
		name    string
		key     Key
		same    func() any // the informer the key must resolve to, if any
		wantErr string
	}{
		{name: "built-in type shares the descriptor's informer", key: ConfigMaps.Key(), same: func() any { return c.InformerFor(ConfigMaps) }},
		{name: "namespaces are the unfiltered Namespace informer", key: Key{Resource: NamespacesResource}, same: func() any { return c.nsInformer }},
		{name: "a type outside the built-in table", key: Key{Resource: widgetsGVR}, wantErr: "not a built-in type"},
		{name: "metadata-only of a resource the server does not serve", key: Key{Resource: schema.GroupVersionResource{Group: "nope.io", Version: "v1", Resource: "things"}, Metadata: true}, wantErr: "does not serve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inf, err := c.Informer(tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Informer(%s) = %v, want an error containing %q", tt.key, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.same != nil && any(inf) != tt.same() {
				t.Errorf("Informer(%s) is not the shared informer", tt.key)
			}
			again, _ := c.Informer(tt.key)
			if again != inf {
				t.Errorf("a second Informer(%s) returned another informer", tt.key)
			}
		})
	}
}

func TestMetadataOnlyNeedsClientAndMapper(t *testing.T) {
	c, err := New(fake.NewClientset(), testPartition, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Informer(Key{Resource: widgetsGVR, Metadata: true}); err == nil || !strings.Contains(err.Error(), "MetadataClient") {
		t.Fatalf("Informer(metadata) without a metadata client = %v, want an error naming Options.MetadataClient", err)
	}
}

func TestKeysByPartition(t *testing.T) {
	c := newAccessorCache(t)
	cluster := testPartition(partition.ClusterKey)
	tests := []struct {
		name      string
		key       Key
		partition partition.ID
		want      []string
	}{
		{name: "namespaced: the admitted partition's objects", key: ConfigMaps.Key(), partition: 1, want: []string{"p1-a/x"}},
		{name: "namespaced: nothing of an unadmitted partition", key: ConfigMaps.Key(), partition: 99},
		{name: "metadata-only namespaced objects are filtered too", key: Key{Resource: widgetsGVR, Metadata: true}, partition: 1, want: []string{"p1-a/w1"}},
		{name: "cluster-scoped objects belong to the cluster partition", key: nodesKey, partition: cluster, want: []string{"n1", "n2"}},
		{name: "cluster-scoped objects belong to no other partition", key: nodesKey, partition: 1},
		{name: "Namespace objects belong to their own partition", key: Key{Resource: NamespacesResource}, partition: 1, want: []string{"p1-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Keys(tt.key, tt.partition)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Keys(%s, %d) = %v, want %v", tt.key, tt.partition, got, tt.want)
			}
		})
	}
	// Cluster-scoped stores are not filtered: every node is cached, whatever is admitted.
	nodes, _ := c.Informer(nodesKey)
	if n := len(nodes.GetStore().ListKeys()); n != 2 {
		t.Errorf("node store holds %d objects, want all 2", n)
	}
	if scoped, err := c.ClusterScoped(nodesKey); err != nil || !scoped {
		t.Errorf("ClusterScoped(nodes) = %v, %v; want true", scoped, err)
	}
	if scoped, err := c.ClusterScoped(Key{Resource: widgetsGVR, Metadata: true}); err != nil || scoped {
		t.Errorf("ClusterScoped(widgets) = %v, %v; want false", scoped, err)
	}
}

// TestRunStartsWhenPreparesPause: the informers start once Prepares pause for a tenth of
// StartWindow, not a whole StartWindow after the first: a first assignment comes in one
// burst, and a shard is not Ready before its informers have started.
func TestRunStartsWhenPreparesPause(t *testing.T) {
	const window = 10 * time.Second
	tests := []struct {
		name     string
		prepares int           // Prepares of partitions 1, 2, …
		gap      time.Duration // between them
	}{
		{name: "one Prepare", prepares: 1},
		{name: "a burst", prepares: 4, gap: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset(ns("p1-a"), ns("p2-a"), ns("p3-a"), ns("p4-a"))
			lists := &listCounter{}
			client.PrependReactor("list", "configmaps", lists.react)
			c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond, StartWindow: window})
			if err != nil {
				t.Fatal(err)
			}
			c.InformerFor(ConfigMaps)
			c.Run(ctx)
			errs := make(chan error, tt.prepares)
			for p := 1; p <= tt.prepares; p++ {
				go func() { errs <- c.Prepare(ctx, []partition.ID{partition.ID(p)}) }()
				time.Sleep(tt.gap)
			}
			for range tt.prepares {
				select {
				case err := <-errs:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(window / 2):
					t.Fatalf("Prepare did not return within half the StartWindow (%v)", window)
				}
			}
			if n := lists.count("p1-a") + lists.count("p2-a") + lists.count("p3-a") + lists.count("p4-a"); n != 0 {
				t.Errorf("%d namespace-scoped lists, want 0: the informers started after the burst", n)
			}
		})
	}
}

// TestRunStartsAfterFirstPrepare: after Run the cache starts its informers itself, a
// StartWindow after the first Prepare, and that Prepare returns once they are synced.
func TestRunStartsAfterFirstPrepare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p1-a"), ns("p2-a"), cm("p1-a", "x", 0), cm("p2-a", "y", 0))
	lists := &listCounter{}
	client.PrependReactor("list", "configmaps", lists.react)
	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond, StartWindow: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	c.Run(ctx)
	if c.Started() {
		t.Fatal("Run started the informers before any Prepare")
	}
	if err := c.Synced(nil); err != nil {
		t.Errorf("Synced with nothing to hold: %v", err)
	}
	errs := make(chan error, 2)
	for _, p := range []partition.ID{1, 2} {
		go func() { errs <- c.Prepare(ctx, []partition.ID{p}) }()
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Prepare after Run did not return")
		}
	}
	if !c.Started() || !c.Prepared(1) || !c.Prepared(2) {
		t.Fatalf("after Prepare: started %v, prepared 1 %v, 2 %v; want all true", c.Started(), c.Prepared(1), c.Prepared(2))
	}
	if err := c.Synced([]partition.ID{1, 2}); err != nil {
		t.Errorf("Synced: %v", err)
	}
	if err := c.Synced([]partition.ID{3}); err == nil {
		t.Error("Synced of a partition never prepared: nil, want an error")
	}
	// Both partitions were filled by the informers' first list: no namespace-scoped list.
	if n := lists.count("p1-a") + lists.count("p2-a"); n != 0 {
		t.Errorf("%d namespace-scoped lists, want 0: the first list fills the first assignment", n)
	}
}

// TestWarmupWaitsForClusterScopedInformers: a partition warmed while the informers run is
// prepared only once the unfiltered informers (the cluster-scoped types the cluster
// partition's work reads) have synced too.
func TestWarmupWaitsForClusterScopedInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p1-a"), node("n1"))
	failNodes := make(chan struct{})
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-failNodes:
			return false, nil, nil
		default:
			return true, nil, errors.New("nodes unavailable")
		}
	})
	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	if _, err := c.Informer(nodesKey); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	cluster := testPartition(partition.ClusterKey)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := c.Prepare(short, []partition.ID{cluster}); err == nil {
		t.Fatal("Prepare of the cluster partition returned while the Node informer cannot list")
	}
	if c.Prepared(cluster) {
		t.Fatal("the cluster partition is Prepared while the Node informer has not synced")
	}
	close(failNodes)
	if err := c.Prepare(ctx, []partition.ID{cluster}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := c.Keys(nodesKey, cluster); !slices.Equal(keys, []string{"n1"}) {
		t.Errorf("Keys(nodes, cluster) = %v once prepared, want [n1]", keys)
	}
}

// TestPrepareReleasedBeforeStart: a partition released while its Prepare waits for the
// informers' first start reports ErrReleased, not success.
func TestPrepareReleasedBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The start window is long enough that Release, sent as soon as the Prepare is
	// registered, lands while it waits (a fixed sleep raced a loaded machine: make test
	// saw Prepare succeed).
	c, err := New(fake.NewClientset(ns("p1-a")), testPartition, Options{PollInterval: 5 * time.Millisecond, StartWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	c.Run(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Prepare(ctx, []partition.ID{1}) }()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.parts[1] != nil, nil // Prepare registered, now waiting for the start window
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrReleased) {
			t.Fatalf("Prepare of a partition released meanwhile = %v, want ErrReleased", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Prepare did not return")
	}
}
