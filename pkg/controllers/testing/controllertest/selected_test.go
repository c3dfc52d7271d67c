package controllertest

import (
	"context"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

var (
	testPods       = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	testTerminated = controllers.Resource{GroupVersionResource: testPods.GroupVersionResource,
		FieldSelector: "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"}
)

func phasePod(ns, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
}

func storeKeys(inf toolscache.SharedIndexInformer) []string {
	ks := inf.GetIndexer().ListKeys()
	sort.Strings(ks)
	return ks
}

// A field-selected resource is served by an informer of its own, which a fixture's Cache
// fills with the objects the selector selects (and empties of one it no longer selects)
// and Uncache empties.
func TestFieldSelectedInformerCached(t *testing.T) {
	d := controllers.Descriptor{Name: "x", FixedWorkers: 1, Primary: []controllers.Resource{testPods},
		Reads: []controllers.Resource{testTerminated}}
	f := NewFixture(t, d)
	ctx := f.ControllerContext()
	selected, err := ctx.Informers.InformerFor(testTerminated)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := ctx.Informers.InformerFor(testPods)
	if err != nil {
		t.Fatal(err)
	}
	if selected == whole {
		t.Fatal("the field-selected informer is the pod informer")
	}
	if again, _ := ctx.Informers.InformerFor(testTerminated); again != selected {
		t.Error("asking twice gave two informers")
	}
	done := phasePod("a", "done", corev1.PodSucceeded)
	f.Cache(phasePod("a", "run", corev1.PodRunning), done, phasePod("b", "failed", corev1.PodFailed))
	if got, want := storeKeys(selected), []string{"a/done", "b/failed"}; !slices.Equal(got, want) {
		t.Errorf("selected informer holds %v, want %v", got, want)
	}
	if got := storeKeys(whole); len(got) != 3 {
		t.Errorf("pod informer holds %v, want all 3", got)
	}
	f.Cache(phasePod("a", "done", corev1.PodRunning)) // no longer selected (made up, but a selector may do it)
	f.Uncache(phasePod("b", "failed", corev1.PodFailed))
	if got := storeKeys(selected); len(got) != 0 {
		t.Errorf("selected informer holds %v, want none", got)
	}
}

// A selector on a field the type cannot be selected by fails the test, as the API server
// refuses it.
func TestFieldSelectorUnknownField(t *testing.T) {
	sel := controllers.Resource{GroupVersionResource: testPods.GroupVersionResource, FieldSelector: "spec.priority=1"}
	inf, err := Informers{SharedInformerFactory: informers.NewSharedInformerFactory(fake.NewClientset(), 0)}.InformerFor(sel)
	if err != nil {
		t.Fatal(err)
	}
	_ = inf
	if _, err := matches(mustSelector(t, sel.FieldSelector), phasePod("a", "b", corev1.PodFailed)); err == nil {
		t.Error("a selector on spec.priority matched a pod without error")
	}
}

// With running informers (Run), the field-selected informer follows the API server's
// objects through the factory's informer of its type.
func TestFieldSelectedInformerRunning(t *testing.T) {
	client := fake.NewClientset(phasePod("a", "done", corev1.PodSucceeded), phasePod("a", "run", corev1.PodRunning))
	watches := TrackWatches(client)
	factory := informers.NewSharedInformerFactory(client, 0)
	t.Cleanup(func() { forgetSelected(factory) })
	selected, err := Informers{SharedInformerFactory: factory}.InformerFor(testTerminated)
	if err != nil {
		t.Fatal(err)
	}
	queue := NewQueue()
	Run(t, context.Background(), nopController{}, 1, queue, factory, watches, "pods")
	if got, want := storeKeys(selected), []string{"a/done"}; !slices.Equal(got, want) {
		t.Errorf("after the first list: %v, want %v", got, want)
	}
	ctx := context.Background()
	run, err := client.CoreV1().Pods("a").Get(ctx, "run", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.Status.Phase = corev1.PodFailed
	if _, err := client.CoreV1().Pods("a").UpdateStatus(ctx, run, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("a").Delete(ctx, "done", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, ctx, "a/run selected and a/done gone", func() bool {
		return slices.Equal(storeKeys(selected), []string{"a/run"})
	})
}

type nopController struct{}

func (nopController) Run(ctx context.Context, _ int) { <-ctx.Done() }

func mustSelector(t *testing.T, s string) fieldsSelector {
	t.Helper()
	sel, err := fields.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

type fieldsSelector = fields.Selector
