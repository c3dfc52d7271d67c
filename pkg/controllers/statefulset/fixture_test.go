package statefulset

import (
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand: the informers never run. catchUp copies what the fake API server holds into the
// caches, as informers would after a while, and kubelet plays the node.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

var (
	setsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
)

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(t0)}
	controllertest.StatusSubresource(f.Client, setsGVR)
	ctrl, err := newController(f.ControllerContext(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// catchUp makes the caches hold exactly what the fake API server holds.
func (f *fixture) catchUp() {
	f.T.Helper()
	// The API server gives a new pod the phase Pending.
	for _, p := range f.apiPods() {
		if p.Status.Phase == "" {
			p.Status.Phase = corev1.PodPending
			if err := f.Client.Tracker().Update(podsGVR, p, "ns"); err != nil {
				f.T.Fatal(err)
			}
		}
	}
	stored := [][]runtime.Object{
		controllertest.Objects(controllertest.Stored[*appsv1.StatefulSet](f.T, f.Client, "ns")...),
		controllertest.Objects(f.apiPods()...),
		controllertest.Objects(controllertest.Stored[*corev1.PersistentVolumeClaim](f.T, f.Client, "ns")...),
		controllertest.Objects(f.apiRevisions()...),
	}
	for i, sample := range []runtime.Object{&appsv1.StatefulSet{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &appsv1.ControllerRevision{}} {
		idx := f.Indexer(sample)
		for _, o := range idx.List() {
			if err := idx.Delete(o); err != nil {
				f.T.Fatal(err)
			}
		}
		f.Cache(stored[i]...)
	}
}

// kubelet makes the stored pods named run Running and Ready since at, then catches up.
func (f *fixture) kubelet(at time.Time, names ...string) {
	f.T.Helper()
	for _, n := range names {
		p := controllertest.Get[*corev1.Pod](f.T, f.Client, "ns", n)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
		if err := f.Client.Tracker().Update(podsGVR, p, "ns"); err != nil {
			f.T.Fatal(err)
		}
	}
	f.catchUp()
}

// apiPods returns the pods the fake API server holds, by name.
func (f *fixture) apiPods() []*corev1.Pod {
	return controllertest.Stored[*corev1.Pod](f.T, f.Client, "ns")
}

func (f *fixture) podNames() []string {
	var out []string
	for _, p := range f.apiPods() {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func (f *fixture) apiRevisions() []*appsv1.ControllerRevision {
	return controllertest.Stored[*appsv1.ControllerRevision](f.T, f.Client, "ns")
}

func (f *fixture) apiSet(name string) *appsv1.StatefulSet {
	return controllertest.Get[*appsv1.StatefulSet](f.T, f.Client, "ns", name)
}

// lastStatus returns the status of the last UpdateStatus, and false without one.
func (f *fixture) lastStatus() (appsv1.StatefulSetStatus, bool) {
	sets := controllertest.StatusUpdates[*appsv1.StatefulSet](f.Client)
	if len(sets) == 0 {
		return appsv1.StatefulSetStatus{}, false
	}
	return sets[len(sets)-1].Status, true
}

// actions returns the fake client's writes as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.Client, controllertest.Writes|controllertest.ObjectNames)
}

// --- object builders ---

var selectorLabels = map[string]string{"app": "web"}

type setOpt func(*appsv1.StatefulSet)

// newSet is a StatefulSet as the API server defaults it: OrderedReady, RollingUpdate
// with partition 0, revisionHistoryLimit 10, retention Retain/Retain.
func newSet(name string, replicas int32, opts ...setOpt) *appsv1.StatefulSet {
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: "1"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: selectorLabels},
			ServiceName:         "svc",
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)}},
			RevisionHistoryLimit: ptr.To[int32](10),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1"}}},
			},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: retain, WhenScaled: retain},
		},
	}
	for _, o := range opts {
		o(set)
	}
	return set
}

func parallel() setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }
}

func image(img string) setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = img }
}

func partitioned(p int32) setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(p) }
}

func maxUnavail(v intstr.IntOrString) setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &v }
}

func onDelete() setOpt {
	return func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
}

func ordinalsStart(n int32) setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: n} }
}

func minReady(n int32) setOpt { return func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = n } }

func historyLimit(n int32) setOpt {
	return func(s *appsv1.StatefulSet) { s.Spec.RevisionHistoryLimit = ptr.To(n) }
}

func withClaims(names ...string) setOpt {
	return func(s *appsv1.StatefulSet) {
		for _, n := range names {
			s.Spec.VolumeClaimTemplates = append(s.Spec.VolumeClaimTemplates, corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: n},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			})
		}
	}
}

func retention(whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType) setOpt {
	return func(s *appsv1.StatefulSet) {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: whenDeleted, WhenScaled: whenScaled}
	}
}

type podOpt func(*corev1.Pod)

// podAt returns the pod of ordinal as the controller creates it at the revision
// revision, Running and Ready since an hour before t0.
func podAt(set *appsv1.StatefulSet, ordinal int, revision string, opts ...podOpt) *corev1.Pod {
	p := newPod(set, ordinal)
	p.UID = types.UID("uid-" + p.Name)
	setPodRevision(p, revision)
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady() podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions = nil }
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

// revisionOf returns the revision the controller records for set's template.
func revisionOf(t *testing.T, set *appsv1.StatefulSet, number int64) *appsv1.ControllerRevision {
	t.Helper()
	r, err := newRevision(set, number, ptr.To[int32](0))
	if err != nil {
		t.Fatal(err)
	}
	r.Namespace = set.Namespace
	r.UID = types.UID("uid-" + r.Name)
	return r
}
