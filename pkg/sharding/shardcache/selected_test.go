package shardcache

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// terminated is the field selector of the pod garbage collector's terminated pods.
const terminated = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"

func podIn(ns, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "test"}}}, Status: corev1.PodStatus{Phase: phase}}
}

// selectingAPI makes client's pod lists honour their field selector on status.phase (the
// fake clientset ignores field selectors) and records the selectors of pod lists and
// watches.
type selectingAPI struct {
	mu        sync.Mutex
	selectors []string
}

func (s *selectingAPI) install(client *fake.Clientset) {
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		s.record("list " + sel.String())
		objs, err := client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"),
			corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		all := objs.(*corev1.PodList)
		out := &corev1.PodList{ListMeta: all.ListMeta}
		for _, p := range all.Items {
			if sel.Matches(fields.Set{"status.phase": string(p.Status.Phase)}) {
				out.Items = append(out.Items, p)
			}
		}
		return true, out, nil
	})
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		s.record("watch " + a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.String())
		return false, nil, nil
	})
}

func (s *selectingAPI) record(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.selectors = append(s.selectors, x)
}

func (s *selectingAPI) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.selectors)
}

// A field-selected key is a separate informer, cached whole (every namespace, no
// partition prepared), holding only the selected objects, listed and watched with the
// selector, and indexed under the cluster partition; the key without a selector keeps its
// partition-filtered informer.
func TestCacheFieldSelected(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p5-a"), ns("p6-a"),
		podIn("p5-a", "running", corev1.PodRunning), podIn("p5-a", "done", corev1.PodSucceeded),
		podIn("p6-a", "failed", corev1.PodFailed), podIn("p6-a", "pending", corev1.PodPending))
	api := &selectingAPI{}
	api.install(client)
	c, err := New(client, testPartition, Options{DisableWatchList: true})
	if err != nil {
		t.Fatal(err)
	}
	key := Key{Resource: Pods.Resource, FieldSelector: terminated}
	selected, err := c.Informer(key)
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Informer(Pods.Key())
	if err != nil {
		t.Fatal(err)
	}
	if selected == all {
		t.Fatal("the field-selected informer is the pod informer")
	}
	if again, _ := c.Informer(key); again != selected {
		t.Error("asking twice gave two informers")
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(selected.GetIndexer().ListKeys()), []string{"p5-a/done", "p6-a/failed"}; !slices.Equal(got, want) {
		t.Errorf("field-selected informer holds %v, want %v (no partition prepared)", got, want)
	}
	if got := all.GetIndexer().ListKeys(); len(got) != 0 {
		t.Errorf("the pod informer holds %v with no partition prepared", got)
	}
	for _, o := range selected.GetIndexer().List() {
		if p := o.(*corev1.Pod); p.ManagedFields != nil {
			t.Errorf("%s/%s kept its managedFields", p.Namespace, p.Name)
		}
	}
	keys, err := c.Keys(key, c.ClusterPartition())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"p5-a/done", "p6-a/failed"}; !slices.Equal(keys, want) {
		t.Errorf("Keys of the cluster partition = %v, want %v", keys, want)
	}
	if keys, _ := c.Keys(key, 5); len(keys) != 0 {
		t.Errorf("Keys of partition 5 = %v, want none: the selected objects are the cluster partition's", keys)
	}
	if byNS, err := selected.GetIndexer().ByIndex("namespace", "p6-a"); err != nil || len(byNS) != 1 {
		t.Errorf("namespace index of p6-a: %d objects, %v", len(byNS), err)
	}
	if scoped, err := c.ClusterScoped(key); err != nil || scoped {
		t.Errorf("ClusterScoped(%s) = %v, %v; want false", key, scoped, err)
	}
	if got := key.String(); got != "pods (fieldSelector="+terminated+")" {
		t.Errorf("String() = %q", got)
	}
	waitFor(t, "the selected watch", func() bool { return slices.Contains(api.seen(), "watch "+terminated) })
	if !slices.Contains(api.seen(), "list "+terminated) {
		t.Errorf("pod lists and watches %v: none listed with the selector", api.seen())
	}
	// A selected object created later comes through the watch.
	if _, err := client.CoreV1().Pods("p6-a").Create(ctx, podIn("p6-a", "new", corev1.PodFailed), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "p6-a/new cached", func() bool {
		_, ok, _ := selected.GetIndexer().GetByKey("p6-a/new")
		return ok
	})
}

func sortedKeys(ks []string) []string { slices.Sort(ks); return ks }
