package replicationcontroller

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const rcObject = "@ReplicationController/v1"

// TestSync runs the controller on ReplicationControllers and checks what the
// ReplicationController kind changes against the ReplicaSet controller: pods controlled
// by kind ReplicationController, adoption by the map selector, the ReplicationController's
// status, and events recorded on it.
func TestSync(t *testing.T) {
	rc := newRC("web", 3)
	rsOwner := controlledBy(&metav1.ObjectMeta{Name: "rs", UID: "uid-rs"}, "apps/v1", "ReplicaSet")
	rcOwner := controlledBy(rc, "v1", "ReplicationController")
	tests := []struct {
		name string
		rc   *corev1.ReplicationController
		pods []*corev1.Pod

		wantPods    int // live pods controlled by the RC once settled
		wantCreates int
		wantDeletes int
		wantPatch   bool           // adopts or releases (a retried sync may patch again: the count varies)
		wantEvents  map[string]int // "type reason" → count, all on the ReplicationController
		// wantStatus checks the settled status (replicas, …, observedGeneration).
		wantStatus corev1.ReplicationControllerStatus
	}{
		{name: "creates the missing pods", rc: newRC("web", 3), wantPods: 3, wantCreates: 3,
			wantEvents: map[string]int{"Normal SuccessfulCreate": 3},
			wantStatus: corev1.ReplicationControllerStatus{Replicas: 3, FullyLabeledReplicas: 3, ObservedGeneration: 1}},
		{name: "deletes the surplus", rc: newRC("web", 1),
			pods: []*corev1.Pod{newPod("a", rc.Spec.Template.Labels, &rcOwner), newPod("b", rc.Spec.Template.Labels, &rcOwner),
				newPod("c", rc.Spec.Template.Labels, &rcOwner)},
			wantPods: 1, wantDeletes: 2, wantEvents: map[string]int{"Normal SuccessfulDelete": 2},
			wantStatus: corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 1}},
		{name: "adopts an orphan its map selector matches", rc: newRC("web", 1),
			pods:     []*corev1.Pod{readyPod(newPod("orphan", map[string]string{"app": "web"}, nil))},
			wantPods: 1, wantPatch: true, wantEvents: map[string]int{},
			// The orphan lacks the template's tier label: not fully labelled.
			wantStatus: corev1.ReplicationControllerStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
				ObservedGeneration: 1}},
		{name: "releases a pod it no longer selects and replaces it", rc: newRC("web", 1),
			pods:     []*corev1.Pod{newPod("relabelled", map[string]string{"app": "other"}, &rcOwner)},
			wantPods: 1, wantPatch: true, wantCreates: 1, wantEvents: map[string]int{"Normal SuccessfulCreate": 1},
			wantStatus: corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 1}},
		{name: "leaves a ReplicaSet's pod with matching labels alone", rc: newRC("web", 1),
			pods:     []*corev1.Pod{newPod("of-rs", rc.Spec.Template.Labels, &rsOwner)},
			wantPods: 1, wantCreates: 1, wantEvents: map[string]int{"Normal SuccessfulCreate": 1},
			wantStatus: corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 1}},
		{name: "an empty selector selects no orphan", rc: newRC("web", 0, func(rc *corev1.ReplicationController) {
			rc.Spec.Selector = nil
		}), pods: []*corev1.Pod{newPod("orphan", map[string]string{"app": "web"}, nil)},
			wantEvents: map[string]int{}, wantStatus: corev1.ReplicationControllerStatus{ObservedGeneration: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{tc.rc}
			for _, p := range tc.pods {
				objs = append(objs, p)
			}
			f := newFixture(t, objs...)
			controllertest.WaitFor(t, f.ctx, "the status", func() bool {
				st := f.rc(tc.rc.Name).Status
				st.Conditions = nil
				return apiequality.Semantic.DeepEqual(st, tc.wantStatus)
			})
			var owned []*corev1.Pod
			for _, p := range controllertest.Stored[*corev1.Pod](t, f.client, "ns") {
				if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == tc.rc.UID {
					owned = append(owned, p)
					if ref.Kind != "ReplicationController" || ref.APIVersion != "v1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
						t.Errorf("pod %s: controllerRef %+v, want a blocking v1 ReplicationController reference", p.Name, ref)
					}
				}
			}
			if len(owned) != tc.wantPods {
				t.Errorf("pods controlled by the RC = %d, want %d", len(owned), tc.wantPods)
			}
			for _, p := range owned {
				if tc.wantCreates > 0 && p.GenerateName != "" && p.GenerateName != "web-" {
					t.Errorf("pod %s: generateName %q, want %q", p.Name, p.GenerateName, "web-")
				}
			}
			if got := controllertest.Count(f.client, "create", "pods"); got != tc.wantCreates {
				t.Errorf("pod creates = %d, want %d", got, tc.wantCreates)
			}
			if got := controllertest.Count(f.client, "delete", "pods"); got != tc.wantDeletes {
				t.Errorf("pod deletes = %d, want %d", got, tc.wantDeletes)
			}
			if got := controllertest.Count(f.client, "patch", "pods"); (got > 0) != tc.wantPatch {
				t.Errorf("pod patches = %d, want some: %v", got, tc.wantPatch)
			}
			got := map[string]int{}
			for _, e := range f.events() {
				if !strings.HasSuffix(e, rcObject) {
					t.Errorf("event %q is not recorded on the ReplicationController", e)
				}
				parts := strings.SplitN(e, " ", 3)
				got[parts[0]+" "+parts[1]]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantEvents) {
				t.Errorf("events = %v, want %v", got, tc.wantEvents)
			}
		})
	}
}

// TestReplicaFailure: a create refused by a quota sets the ReplicationController's
// ReplicaFailure condition (reason FailedCreate) and records FailedCreate with the API's
// error, as upstream; the condition is removed once creating works.
func TestReplicaFailure(t *testing.T) {
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		errors.New("exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0"))
	var refuse atomic.Bool
	refuse.Store(true)
	f := newFixtureWith(t, func(f *fixture) {
		f.client.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
			if refuse.Load() {
				return true, nil, quota
			}
			return false, nil, nil
		})
	}, newRC("web", 2))
	controllertest.WaitFor(t, f.ctx, "ReplicaFailure", func() bool {
		c := condition(f.rc("web"), corev1.ReplicationControllerReplicaFailure)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "FailedCreate" &&
			strings.Contains(c.Message, "exceeded quota")
	})
	if len(eventsWith(f.events(), "Warning FailedCreate Error creating: pods is forbidden: exceeded quota")) == 0 {
		t.Error("no FailedCreate event with the API's error")
	}
	refuse.Store(false)
	controllertest.WaitFor(t, f.ctx, "ReplicaFailure removed after successful creates", func() bool {
		rc := f.rc("web")
		return condition(rc, corev1.ReplicationControllerReplicaFailure) == nil && rc.Status.Replicas == 2
	})
}

func condition(rc *corev1.ReplicationController, t corev1.ReplicationControllerConditionType) *corev1.ReplicationControllerCondition {
	for i := range rc.Status.Conditions {
		if rc.Status.Conditions[i].Type == t {
			return &rc.Status.Conditions[i]
		}
	}
	return nil
}

// TestDescriptor pins upstream's names: the worker flag and default, the event source.
func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if d.Name != "replicationcontroller" || d.WorkersFlag != "concurrent-rc-syncs" || d.DefaultWorkers != 5 ||
		d.EventComponent() != "replication-controller" || !d.OnByDefault {
		t.Errorf("descriptor %s: flag %s default %d events as %s on by default %v; want replicationcontroller, concurrent-rc-syncs, 5, replication-controller, true",
			d.Name, d.WorkersFlag, d.DefaultWorkers, d.EventComponent(), d.OnByDefault)
	}
}
