package replicaset

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// failCreatesFrom makes the n-th and every later pod create fail with err.
func failCreatesFrom(f *fixture, n int32, err error) {
	var calls atomic.Int32
	f.Client.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		if calls.Add(1) >= n {
			return true, nil, err
		}
		return false, nil, nil
	})
}

func quotaErr() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		errors.New(`exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2`))
}

func TestManageReplicas(t *testing.T) {
	rs3 := newRS("rs", 3)
	tests := []struct {
		name    string
		rs      *appsv1.ReplicaSet
		pods    []*corev1.Pod
		failAt  int32 // the n-th create and later ones fail (0: none)
		failErr error

		wantCreates, wantDeletes int
		wantErr                  bool
		wantEvents               map[string]int
		wantPendingAdds          int
		wantPendingDels          int
	}{
		{name: "creates all missing pods", rs: newRS("rs", 3), wantCreates: 3,
			wantEvents: map[string]int{"Normal SuccessfulCreate": 3}, wantPendingAdds: 3},
		{name: "creates only the difference", rs: rs3, pods: []*corev1.Pod{newPodOf("a", rs3)}, wantCreates: 2,
			wantEvents: map[string]int{"Normal SuccessfulCreate": 2}, wantPendingAdds: 2},
		{name: "nothing to do at the right count", rs: rs3,
			pods: []*corev1.Pod{newPodOf("a", rs3), newPodOf("b", rs3), newPodOf("c", rs3)}, wantEvents: map[string]int{}},
		{name: "pods being deleted and finished pods are not active", rs: rs3,
			pods: []*corev1.Pod{newPodOf("a", rs3), newPodOf("b", rs3, deleting()),
				newPodOf("c", rs3, phase(corev1.PodSucceeded)), newPodOf("d", rs3, phase(corev1.PodFailed))},
			wantCreates: 2, wantEvents: map[string]int{"Normal SuccessfulCreate": 2}, wantPendingAdds: 2},
		{name: "a pod controlled by another owner does not count", rs: rs3,
			pods:        []*corev1.Pod{newPodOf("a", newRS("other", 1))},
			wantCreates: 3, wantEvents: map[string]int{"Normal SuccessfulCreate": 3}, wantPendingAdds: 3},
		{name: "burst cap: at most 500 creates per sync", rs: newRS("rs", 600), wantCreates: 500,
			wantEvents: map[string]int{"Normal SuccessfulCreate": 500}, wantPendingAdds: 500},
		// batches 1, 2, 4: calls from the 4th on fail, so the third batch fails and no
		// fourth is tried; the 7 creates never made or failed are not expected.
		{name: "slow start stops after the first failing batch", rs: newRS("rs", 10), failAt: 4, failErr: quotaErr(),
			wantCreates: 7, wantErr: true, wantPendingAdds: 3,
			wantEvents: map[string]int{"Normal SuccessfulCreate": 3, "Warning FailedCreate": 4}},
		{name: "a quota error on the first create stops at once", rs: newRS("rs", 10), failAt: 1, failErr: quotaErr(),
			wantCreates: 1, wantErr: true, wantEvents: map[string]int{"Warning FailedCreate": 1}},
		{name: "a terminating namespace is neither an error nor an event", rs: newRS("rs", 3), failAt: 1,
			failErr: controllertest.TerminatingNamespaceError(schema.GroupResource{Resource: "pods"}, "ns"), wantCreates: 3, wantEvents: map[string]int{}, wantPendingAdds: 3},
		{name: "deletes the surplus", rs: newRS("rs", 1),
			pods:        []*corev1.Pod{newPodOf("a", rs3), newPodOf("b", rs3), newPodOf("c", rs3)},
			wantDeletes: 2, wantEvents: map[string]int{"Normal SuccessfulDelete": 2}, wantPendingDels: 2},
		{name: "zero replicas deletes all", rs: newRS("rs", 0),
			pods:        []*corev1.Pod{newPodOf("a", rs3), newPodOf("b", rs3)},
			wantDeletes: 2, wantEvents: map[string]int{"Normal SuccessfulDelete": 2}, wantPendingDels: 2},
		{name: "a ReplicaSet being deleted is not managed",
			rs: newRS("rs", 3, func(rs *appsv1.ReplicaSet) {
				rs.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
				rs.Finalizers = []string{"foregroundDeletion"}
			}), wantEvents: map[string]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// "terminating namespace" fails every create: count calls, not pods.
			f := newFixture(t, objs(tc.rs, tc.pods...)...)
			if tc.failAt > 0 {
				failCreatesFrom(f, tc.failAt, tc.failErr)
			}
			err := f.Sync("ns/rs")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			if got := controllertest.Count(f.Client, "create", "pods"); got != tc.wantCreates {
				t.Errorf("pod creates = %d, want %d", got, tc.wantCreates)
			}
			if got := controllertest.Count(f.Client, "delete", "pods"); got != tc.wantDeletes {
				t.Errorf("pod deletes = %d, want %d", got, tc.wantDeletes)
			}
			if got := f.EventReasons(); fmt.Sprint(got) != fmt.Sprint(tc.wantEvents) {
				t.Errorf("events = %v, want %v", got, tc.wantEvents)
			}
			adds, dels := f.ctrl.expectations.Pending("ns/rs")
			if adds != tc.wantPendingAdds || dels != tc.wantPendingDels {
				t.Errorf("pending expectations = %d adds, %d deletes; want %d, %d", adds, dels, tc.wantPendingAdds, tc.wantPendingDels)
			}
		})
	}
}

func TestCreatedPodFromTemplate(t *testing.T) {
	rs := newRS("web", 1, func(rs *appsv1.ReplicaSet) {
		rs.Spec.Template.Annotations = map[string]string{"note": "x"}
		rs.Spec.Template.Finalizers = []string{"example.com/keep"}
	})
	f := newFixture(t, rs)
	f.MustSync("ns/web")
	pods := controllertest.Created[*corev1.Pod](f.Client)
	if len(pods) != 1 {
		t.Fatalf("created %d pods, want 1", len(pods))
	}
	p := pods[0]
	if p.GenerateName != "web-" {
		t.Errorf("generateName = %q, want web-", p.GenerateName)
	}
	if fmt.Sprint(p.Labels) != fmt.Sprint(rs.Spec.Template.Labels) || p.Annotations["note"] != "x" ||
		fmt.Sprint(p.Finalizers) != "[example.com/keep]" {
		t.Errorf("metadata = labels %v annotations %v finalizers %v, want the template's", p.Labels, p.Annotations, p.Finalizers)
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.UID != rs.UID || ref.Kind != "ReplicaSet" || ref.APIVersion != "apps/v1" ||
		!ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controllerRef = %+v, want the ReplicaSet with blockOwnerDeletion", ref)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Image != "img" {
		t.Errorf("spec = %+v, want the template's", p.Spec)
	}
	ev := f.Events()
	if len(ev) != 1 || ev[0] != "Normal SuccessfulCreate Created pod: web-00001" {
		t.Errorf("events = %q", ev)
	}
}

func TestCreateWithoutLabelsRefused(t *testing.T) {
	rs := newRS("rs", 1, func(rs *appsv1.ReplicaSet) {
		rs.Spec.Selector = &metav1.LabelSelector{}
		rs.Spec.Template.Labels = nil
	})
	f := newFixture(t, rs)
	if err := f.Sync("ns/rs"); err == nil || !strings.Contains(err.Error(), "no labels") {
		t.Fatalf("sync error = %v, want the no-labels error", err)
	}
	if n := controllertest.Count(f.Client, "create", "pods"); n != 0 {
		t.Errorf("creates = %d, want 0", n)
	}
}

func TestFailedDeleteEvent(t *testing.T) {
	rs := newRS("rs", 0)
	a, b := newPodOf("a", rs), newPodOf("b", rs)
	f := newFixture(t, objs(rs, a, b)...)
	f.Client.PrependReactor("delete", "pods", func(act core.Action) (bool, runtime.Object, error) {
		switch act.(core.DeleteAction).GetName() {
		case "a":
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")
		default:
			return true, nil, apierrors.NewInternalError(errors.New("boom"))
		}
	})
	err := f.Sync("ns/rs")
	if err == nil || !strings.Contains(err.Error(), "unable to delete pods") {
		t.Fatalf("sync error = %v, want the delete error", err)
	}
	if got := f.EventReasons(); fmt.Sprint(got) != "map[Warning FailedDelete:1]" {
		t.Errorf("events = %v: a NotFound pod needs no event, the failure one", got)
	}
	if _, dels := f.ctrl.expectations.Pending("ns/rs"); dels != 0 {
		t.Errorf("pending deletes = %d, want 0: failed deletes are never observed", dels)
	}
	st, _ := f.lastStatus()
	if c := findCondition(st.Conditions, appsv1.ReplicaSetReplicaFailure); c == nil || c.Reason != ReasonFailedDelete {
		t.Errorf("conditions = %+v, want ReplicaFailure FailedDelete", st.Conditions)
	}
}

func TestSlowStart(t *testing.T) {
	tests := []struct {
		name      string
		count     int
		failFrom  int32 // calls from this one on fail (0: none)
		wantOK    int
		wantCalls int32
	}{
		{name: "zero", count: 0, wantOK: 0, wantCalls: 0},
		{name: "all succeed", count: 10, wantOK: 10, wantCalls: 10},
		{name: "first call fails", count: 10, failFrom: 1, wantOK: 0, wantCalls: 1},
		{name: "fails in the second batch", count: 10, failFrom: 3, wantOK: 2, wantCalls: 3},
		{name: "fails in the last, short batch", count: 10, failFrom: 10, wantOK: 9, wantCalls: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			ok, err := slowStart(tc.count, func() error {
				if n := calls.Add(1); tc.failFrom > 0 && n >= tc.failFrom {
					return errors.New("no")
				}
				return nil
			})
			if ok != tc.wantOK || calls.Load() != tc.wantCalls || (err != nil) != (tc.failFrom > 0) {
				t.Errorf("slowStart = %d, %v after %d calls; want %d after %d", ok, err, calls.Load(), tc.wantOK, tc.wantCalls)
			}
		})
	}
}

func TestStatusRequeueAfterMinReadySeconds(t *testing.T) {
	rs := newRS("rs", 2, withMinReady(10))
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		wantAfter time.Duration // 0: no delayed requeue
	}{
		{name: "all available: no requeue",
			pods: []*corev1.Pod{newPodOf("a", rs, ready(t0.Add(-time.Minute))), newPodOf("b", rs, ready(t0.Add(-time.Minute)))}},
		{name: "requeue when the earliest ready pod turns available",
			pods:      []*corev1.Pod{newPodOf("a", rs, ready(t0.Add(-3*time.Second))), newPodOf("b", rs, ready(t0.Add(-7*time.Second)))},
			wantAfter: 3 * time.Second},
		{name: "a pod not ready: no requeue",
			pods: []*corev1.Pod{newPodOf("a", rs, ready(t0.Add(-time.Minute))), newPodOf("b", rs)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objs(rs, tc.pods...)...)
			f.MustSync("ns/rs")
			d, ok := f.Queue.After("ns/rs")
			if ok != (tc.wantAfter > 0) || d != tc.wantAfter {
				t.Errorf("requeue after = %v (%v), want %v", d, ok, tc.wantAfter)
			}
		})
	}
}
