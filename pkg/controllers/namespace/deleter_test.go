package namespace

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// okConditions are the conditions of a namespace whose deletion found nothing wrong.
var okConditions = map[corev1.NamespaceConditionType]string{
	corev1.NamespaceDeletionDiscoveryFailure: "False ResourcesDiscovered: All resources successfully discovered",
	corev1.NamespaceDeletionGVParsingFailure: "False ParsedGroupVersions: All legacy kube types successfully parsed",
	corev1.NamespaceDeletionContentFailure:   "False ContentDeleted: All content successfully deleted, may be waiting on finalization",
	corev1.NamespaceContentRemaining:         "False ContentRemoved: All content successfully removed",
	corev1.NamespaceFinalizersRemaining:      "False ContentHasNoFinalizers: All content-preserving finalizers finished",
}

// with returns okConditions with some replaced.
func with(over map[corev1.NamespaceConditionType]string) map[corev1.NamespaceConditionType]string {
	out := map[corev1.NamespaceConditionType]string{}
	for k, v := range okConditions {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

func runningPod(name string, grace int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(grace)},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestSync(t *testing.T) {
	groupFailed := &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
		{Group: "metrics.example.com", Version: "v1"}: errors.New("the server is currently unable to handle the request"),
	}}
	tests := []struct {
		name string
		ns   *corev1.Namespace
		// deletedAgo overrides the namespace's deletion time.
		deletedAgo time.Duration
		pods       []*corev1.Pod
		content    map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata
		prepare    func(f *fixture)

		wantErr        string
		wantRequeue    time.Duration
		wantGone       bool
		wantFinalizers []corev1.FinalizerName
		wantLeft       map[schema.GroupVersionResource][]string
		wantConditions map[corev1.NamespaceConditionType]string
	}{
		{
			name: "not being deleted: nothing done",
			ns:   newNamespace(false, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				configMapsGVR: {object("keep")},
			},
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{configMapsGVR: {"keep"}},
		},
		{
			name: "content of every resource deleted, CRD included, then finalized",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				podsGVR: {object("p")}, configMapsGVR: {object("a"), object("b")}, widgetsGVR: {object("w")},
			},
			wantGone: true,
			wantLeft: map[schema.GroupVersionResource][]string{},
		},
		{
			name:           "other finalizers of the namespace stay, sorted",
			ns:             newNamespace(true, "z.example.com/last", corev1.FinalizerKubernetes, "a.example.com/first"),
			wantFinalizers: []corev1.FinalizerName{"a.example.com/first", "z.example.com/last"},
			wantConditions: okConditions,
		},
		{
			name: "already finalized: no content deleted",
			ns:   newNamespace(true),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				configMapsGVR: {object("keep")},
			},
			wantLeft: map[schema.GroupVersionResource][]string{configMapsGVR: {"keep"}},
		},
		{
			name: "pods first: a pod held by a finalizer keeps the other content",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				podsGVR: {object("p", "example.com/hold")}, configMapsGVR: {object("a")},
			},
			wantRequeue:    8 * time.Second, // 15 s for finalizers: 15/2+1
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{podsGVR: {"p"}, configMapsGVR: {"a"}},
			// Upstream writes the conditions before it counts the remaining content when
			// the pods hold the rest back: they all read "ok" then.
			wantConditions: okConditions,
		},
		{
			name:       "a pod in its grace period: waits half of it plus a second",
			ns:         newNamespace(true, corev1.FinalizerKubernetes),
			deletedAgo: time.Second,
			pods:       []*corev1.Pod{runningPod("p", 30), runningPod("q", 10)},
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				podsGVR: {object("p", "example.com/hold")},
			},
			wantRequeue:    16 * time.Second,
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{podsGVR: {"p"}},
		},
		{
			name:       "grace period over since the namespace's deletion: no estimate",
			ns:         newNamespace(true, corev1.FinalizerKubernetes),
			deletedAgo: time.Minute,
			pods:       []*corev1.Pod{runningPod("p", 30)},
			wantGone:   true,
		},
		{
			name: "foreign finalizers: Terminating with the remaining-content conditions",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				configMapsGVR: {object("a", "example.com/hold"), object("b")},
				widgetsGVR:    {object("w1", "example.com/hold", "example.com/other"), object("w2", "example.com/hold")},
			},
			wantRequeue:    8 * time.Second,
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{configMapsGVR: {"a"}, widgetsGVR: {"w1", "w2"}},
			wantConditions: with(map[corev1.NamespaceConditionType]string{
				corev1.NamespaceContentRemaining:    "True SomeResourcesRemain: Some resources are remaining: configmaps. has 1 resource instances, widgets.example.com has 2 resource instances",
				corev1.NamespaceFinalizersRemaining: "True SomeFinalizersRemain: Some content in the namespace has finalizers remaining: example.com/hold in 3 resource instances, example.com/other in 1 resource instances",
			}),
		},
		{
			name: "a group whose discovery fails: the others' content is deleted, the finalizer stays",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				configMapsGVR: {object("a")}, widgetsGVR: {object("w")},
			},
			prepare:        func(f *fixture) { f.discoveryErr = groupFailed },
			wantErr:        "unable to retrieve the complete list of server APIs: metrics.example.com/v1",
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{},
			wantConditions: with(map[corev1.NamespaceConditionType]string{
				corev1.NamespaceDeletionDiscoveryFailure: "True DiscoveryFailed: Discovery failed for some groups, 1 failing: unable to retrieve the complete list of server APIs: metrics.example.com/v1: the server is currently unable to handle the request",
			}),
		},
		{
			name: "a group version that does not parse",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			prepare: func(f *fixture) {
				f.discovery = append(f.discovery, &metav1.APIResourceList{GroupVersion: "a/b/c",
					APIResources: []metav1.APIResource{{Name: "things", Namespaced: true, Verbs: allVerbs}}})
			},
			wantErr:        "unexpected GroupVersion string: a/b/c",
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantConditions: with(map[corev1.NamespaceConditionType]string{
				corev1.NamespaceDeletionGVParsingFailure: "True GroupVersionParsingFailed: unexpected GroupVersion string: a/b/c",
			}),
		},
		{
			name: "a failed delete: the content failure condition, the others go on",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				configMapsGVR: {object("a")}, widgetsGVR: {object("w")},
			},
			prepare: func(f *fixture) {
				f.fail["delete-collection widgets"] = apierrors.NewInternalError(errors.New("etcd is sad"))
			},
			wantErr:        "etcd is sad",
			wantFinalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes},
			wantLeft:       map[schema.GroupVersionResource][]string{widgetsGVR: {"w"}},
			wantConditions: with(map[corev1.NamespaceConditionType]string{
				corev1.NamespaceDeletionContentFailure: "True ContentDeletionFailed: Failed to delete all resource types, 1 remaining: Internal error occurred: etcd is sad",
			}),
		},
		{
			name: "no deletecollection in discovery: deleted item by item",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				widgetsGVR: {object("w1"), object("w2")},
			},
			prepare: func(f *fixture) {
				f.fail["delete-collection widgets"] = errors.New("deletecollection must not be called")
				f.discovery[1].APIResources[0].Verbs = metav1.Verbs{"delete", "get", "list"}
			},
			wantGone: true,
			wantLeft: map[schema.GroupVersionResource][]string{},
		},
		{
			name: "deletecollection answered 405: deleted item by item",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				widgetsGVR: {object("w1")},
			},
			prepare: func(f *fixture) {
				f.fail["delete-collection widgets"] = apierrors.NewMethodNotSupported(widgetsGVR.GroupResource(), "deletecollection")
			},
			wantGone: true,
			wantLeft: map[schema.GroupVersionResource][]string{},
		},
		{
			name: "a resource without delete is left alone",
			ns:   newNamespace(true, corev1.FinalizerKubernetes),
			content: map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{
				widgetsGVR: {object("w1")},
			},
			prepare: func(f *fixture) {
				f.discovery[1].APIResources[0].Verbs = metav1.Verbs{"get", "list"}
			},
			wantGone: true,
			wantLeft: map[schema.GroupVersionResource][]string{widgetsGVR: {"w1"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.deletedAgo != 0 {
				tc.ns.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-tc.deletedAgo)}
			}
			f := newFixture(t, tc.ns, tc.pods...)
			for gvr, objs := range tc.content {
				f.add(gvr, objs...)
			}
			if tc.prepare != nil {
				tc.prepare(f)
				f.restart() // the operation cache is filled from discovery at start
			}
			err := f.sync()
			var requeue *controllers.RequeueAfterError
			switch {
			case tc.wantRequeue != 0:
				if !errors.As(err, &requeue) || requeue.After != tc.wantRequeue {
					t.Fatalf("sync: %v, want a requeue after %v", err, tc.wantRequeue)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.As(err, &requeue) {
					t.Fatalf("sync: %v, want an error with %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("sync: %v", err)
			}
			ns := f.namespace()
			if tc.wantGone != (ns == nil) {
				t.Fatalf("namespace gone = %v, want %v", ns == nil, tc.wantGone)
			}
			if ns != nil && !reflect.DeepEqual(ns.Spec.Finalizers, tc.wantFinalizers) {
				t.Errorf("finalizers %v, want %v", ns.Spec.Finalizers, tc.wantFinalizers)
			}
			if tc.wantLeft != nil {
				got := map[schema.GroupVersionResource][]string{}
				for _, gvr := range []schema.GroupVersionResource{podsGVR, configMapsGVR, widgetsGVR} {
					if left := f.left(gvr); len(left) > 0 {
						got[gvr] = left
					}
				}
				if !reflect.DeepEqual(got, tc.wantLeft) {
					t.Errorf("content left %v, want %v", got, tc.wantLeft)
				}
			}
			if tc.wantConditions != nil && !reflect.DeepEqual(f.conditions(), tc.wantConditions) {
				t.Errorf("conditions\n%v\nwant\n%v", f.conditions(), tc.wantConditions)
			}
		})
	}
}

// TestForeignFinalizerRemoved: a namespace held by its content's finalizers finishes, and
// its conditions say so, once they are removed.
func TestForeignFinalizerRemoved(t *testing.T) {
	f := newFixture(t, newNamespace(true, corev1.FinalizerKubernetes))
	f.add(configMapsGVR, object("a", "example.com/hold"))
	var requeue *controllers.RequeueAfterError
	if err := f.sync(); !errors.As(err, &requeue) {
		t.Fatalf("sync with a held ConfigMap: %v, want a requeue", err)
	}
	if got := f.conditions()[corev1.NamespaceFinalizersRemaining]; !strings.HasPrefix(got, "True ") {
		t.Fatalf("FinalizersRemaining %q, want True", got)
	}
	f.removeFinalizers(configMapsGVR, "a")
	if err := f.sync(); err != nil {
		t.Fatalf("sync after the finalizer was removed: %v", err)
	}
	if f.namespace() != nil {
		t.Fatal("namespace still there")
	}
}

// TestPhaseSetToTerminating: a deleted namespace whose phase is still Active is marked
// Terminating first.
func TestPhaseSetToTerminating(t *testing.T) {
	ns := newNamespace(true, corev1.FinalizerKubernetes, "example.com/keep")
	ns.Status.Phase = corev1.NamespaceActive
	f := newFixture(t, ns)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if got := f.namespace().Status.Phase; got != corev1.NamespaceTerminating {
		t.Errorf("phase %s, want Terminating", got)
	}
}

// TestNewNeedsDiscovery: a server that reports no resources stops the controller's start
// (upstream's exits).
func TestNewNeedsDiscovery(t *testing.T) {
	_, err := newDeleter(controllertest.Logger(t), nil, nil, func() ([]*metav1.APIResourceList, error) {
		return nil, errors.New("connection refused")
	})
	if err == nil || !strings.Contains(err.Error(), "unable to get any supported resources") {
		t.Fatalf("newDeleter: %v, want an error", err)
	}
}
