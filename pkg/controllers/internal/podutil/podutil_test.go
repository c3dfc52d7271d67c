package podutil

import (
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func pod(opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func readySince(t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t)})
	}
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
}

func inPhase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func beingDeleted(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }

func TestPredicates(t *testing.T) {
	tests := []struct {
		name                                  string
		pod                                   *corev1.Pod
		minReady                              int32
		ready, available, active, terminating bool
	}{
		{name: "no conditions", pod: pod(), active: true},
		{name: "not ready", pod: pod(notReady), active: true},
		{name: "ready, no minReadySeconds", pod: pod(readySince(now)), ready: true, available: true, active: true},
		{name: "ready long enough", pod: pod(readySince(now.Add(-10 * time.Second))), minReady: 10,
			ready: true, available: true, active: true},
		{name: "ready not long enough", pod: pod(readySince(now.Add(-9 * time.Second))), minReady: 10, ready: true, active: true},
		{name: "ready at an unknown time", pod: pod(readySince(time.Time{})), minReady: 10, ready: true, active: true},
		{name: "the first Ready condition counts", pod: pod(notReady, readySince(now)), active: true},
		{name: "terminating", pod: pod(beingDeleted), terminating: true},
		{name: "succeeded", pod: pod(inPhase(corev1.PodSucceeded))},
		{name: "failed and being deleted", pod: pod(inPhase(corev1.PodFailed), beingDeleted)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := [4]bool{IsReady(tc.pod), IsAvailable(tc.pod, tc.minReady, now), IsActive(tc.pod), IsTerminating(tc.pod)}
			if want := [4]bool{tc.ready, tc.available, tc.active, tc.terminating}; got != want {
				t.Errorf("ready, available, active, terminating = %v, want %v", got, want)
			}
		})
	}
}

func TestNextAvailabilityCheck(t *testing.T) {
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		minReady int32
		elapsed  time.Duration // from the evaluation to now
		want     time.Duration
		wantOK   bool
	}{
		{name: "no pods"},
		{name: "no minReadySeconds", pods: []*corev1.Pod{pod(readySince(now))}},
		{name: "all available", minReady: 5, pods: []*corev1.Pod{pod(readySince(now.Add(-time.Minute)))}},
		{name: "the earliest one", minReady: 10, wantOK: true, want: 4 * time.Second,
			pods: []*corev1.Pod{pod(readySince(now.Add(-2 * time.Second))), pod(readySince(now.Add(-6 * time.Second))), pod(notReady)}},
		{name: "time passed since the evaluation", minReady: 10, elapsed: time.Second, wantOK: true, want: 3 * time.Second,
			pods: []*corev1.Pod{pod(readySince(now.Add(-6 * time.Second)))}},
		{name: "turned available since the evaluation: now", minReady: 10, elapsed: 5 * time.Second, wantOK: true,
			pods: []*corev1.Pod{pod(readySince(now.Add(-6 * time.Second)))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NextAvailabilityCheck(tc.pods, tc.minReady, now, now.Add(tc.elapsed))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("NextAvailabilityCheck = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestByController(t *testing.T) {
	owner := Owner{Namespace: "ns", Kind: "ReplicaSet", Name: "rs", UID: "u1"}
	mk := func(name, ns string, ref *metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name)}}
		if ref != nil {
			p.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		return p
	}
	ctl := func(kind, name string, uid types.UID) *metav1.OwnerReference {
		return &metav1.OwnerReference{Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
	}
	inf := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	if err := AddControllerIndex(inf); err != nil {
		t.Fatal(err)
	}
	if err := AddControllerIndex(inf); err != nil {
		t.Fatalf("a second AddControllerIndex: %v", err)
	}
	for _, p := range []*corev1.Pod{
		mk("mine", "ns", ctl("ReplicaSet", "rs", "u1")),
		mk("namesake-of-old", "ns", ctl("ReplicaSet", "rs", "u0")),
		mk("orphan", "ns", nil),
		mk("non-controller-owner", "ns", &metav1.OwnerReference{Kind: "ReplicaSet", Name: "rs", UID: "u1"}),
		mk("other-ns-orphan", "other", nil),
		mk("theirs", "ns", ctl("Job", "j", "u2")),
	} {
		if err := inf.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		owner   Owner
		orphans bool
		want    string
		wantErr bool
	}{
		{name: "own pods", owner: owner, want: "[mine]"},
		{name: "with orphans", owner: owner, orphans: true, want: "[mine non-controller-owner orphan]"},
		{name: "incomplete owner", owner: Owner{Namespace: "ns", Name: "rs"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := ByController(inf.GetIndexer(), tc.owner, tc.orphans)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			var names []string
			for _, p := range pods {
				names = append(names, p.Name)
			}
			sort.Strings(names)
			if !tc.wantErr && fmt.Sprint(names) != tc.want {
				t.Errorf("pods = %v, want %s", names, tc.want)
			}
		})
	}
}
