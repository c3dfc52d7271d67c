package statefulset

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func objs(set *appsv1.StatefulSet, more ...runtime.Object) []runtime.Object {
	return append([]runtime.Object{set}, more...)
}

func TestCreatePods(t *testing.T) {
	tests := []struct {
		name string
		set  *appsv1.StatefulSet
		// want is the pods stored after each sync, the pods named in run made ready
		// between syncs.
		want [][]string
		run  [][]string
	}{
		{name: "OrderedReady creates one pod at a time, each once the previous is ready",
			set:  newSet("web", 3),
			want: [][]string{{"web-0"}, {"web-0"}, {"web-0", "web-1"}, {"web-0", "web-1", "web-2"}},
			run:  [][]string{nil, {"web-0"}, {"web-1"}, nil}},
		{name: "Parallel creates every pod at once", set: newSet("web", 3, parallel()),
			want: [][]string{{"web-0", "web-1", "web-2"}}, run: [][]string{nil}},
		{name: "ordinals.start shifts the names", set: newSet("web", 2, parallel(), ordinalsStart(5)),
			want: [][]string{{"web-5", "web-6"}}, run: [][]string{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.set)
			for i, want := range tt.want {
				f.MustSync("ns/web")
				if got := f.podNames(); !slices.Equal(got, want) {
					t.Fatalf("after sync %d: pods %v, want %v", i+1, got, want)
				}
				f.catchUp()
				f.kubelet(t0, tt.run[i]...)
			}
		})
	}
}

func TestPodIdentityAndEvents(t *testing.T) {
	set := newSet("web", 1)
	f := newFixture(t, set)
	f.MustSync("ns/web")
	rev := revisionOf(t, set, 1)
	pod := controllertest.Get[*corev1.Pod](t, f.Client, "ns", "web-0")
	wantLabels := map[string]string{"app": "web", appsv1.StatefulSetPodNameLabel: "web-0", appsv1.PodIndexLabel: "0",
		appsv1.StatefulSetRevisionLabel: rev.Name}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if pod.Spec.Hostname != "web-0" || pod.Spec.Subdomain != "svc" || pod.GenerateName != "web-" || !metav1.IsControlledBy(pod, set) {
		t.Errorf("hostname %q subdomain %q generateName %q owners %v", pod.Spec.Hostname, pod.Spec.Subdomain, pod.GenerateName, pod.OwnerReferences)
	}
	revs := f.apiRevisions()
	if len(revs) != 1 || revs[0].Name != rev.Name || revs[0].Revision != 1 || !metav1.IsControlledBy(revs[0], set) {
		t.Fatalf("revisions %v, want %s", revs, rev.Name)
	}
	if got := f.Events(); !slices.Equal(got, []string{"Normal SuccessfulCreate Create Pod web-0 in StatefulSet web successful"}) {
		t.Errorf("events %v", got)
	}
	st, ok := f.lastStatus()
	if !ok {
		t.Fatal("no status written")
	}
	if st.ObservedGeneration != 1 || st.CurrentRevision != rev.Name || st.UpdateRevision != rev.Name || st.CollisionCount == nil || *st.CollisionCount != 0 || st.Replicas != 0 {
		t.Errorf("status %+v", st)
	}
}

func TestScaleDown(t *testing.T) {
	tests := []struct {
		name       string
		set        *appsv1.StatefulSet
		pods       func(set *appsv1.StatefulSet, rev string) []*corev1.Pod
		wantDelete []string
	}{
		{name: "OrderedReady deletes the highest ordinal first, one at a time", set: newSet("web", 1),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev), podAt(s, 2, rev)}
			}, wantDelete: []string{"web-2"}},
		{name: "OrderedReady waits for a terminating pod", set: newSet("web", 1),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev), podAt(s, 2, rev, deleting())}
			}},
		{name: "OrderedReady does not scale down past an unhealthy pod", set: newSet("web", 1),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev, notReady()), podAt(s, 1, rev), podAt(s, 2, rev)}
			}},
		{name: "OrderedReady deletes the first unhealthy pod although it is unhealthy", set: newSet("web", 1),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev), podAt(s, 2, rev, notReady())}
			}, wantDelete: []string{"web-2"}},
		{name: "OrderedReady waits while a lower condemned pod is the first unhealthy", set: newSet("web", 1),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev, notReady()), podAt(s, 2, rev, notReady())}
			}},
		{name: "Parallel deletes every condemned pod", set: newSet("web", 1, parallel()),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev), podAt(s, 2, rev, notReady())}
			}, wantDelete: []string{"web-1", "web-2"}},
		{name: "below ordinals.start is condemned too", set: newSet("web", 2, ordinalsStart(1)),
			pods: func(s *appsv1.StatefulSet, rev string) []*corev1.Pod {
				return []*corev1.Pod{podAt(s, 0, rev), podAt(s, 1, rev), podAt(s, 2, rev)}
			}, wantDelete: []string{"web-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := revisionOf(t, tt.set, 1)
			pods := tt.pods(tt.set, rev.Name)
			f := newFixture(t, append(objs(tt.set, rev), controllertest.Objects(pods...)...)...)
			f.MustSync("ns/web")
			var deleted []string
			for _, a := range f.actions() {
				if n, ok := strings.CutPrefix(a, "delete pods "); ok {
					deleted = append(deleted, n)
				}
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, tt.wantDelete) {
				t.Errorf("deleted %v, want %v (actions %v)", deleted, tt.wantDelete, f.actions())
			}
			for _, e := range f.Events() {
				if strings.Contains(e, "SuccessfulDelete") && !strings.HasPrefix(e, "Normal SuccessfulDelete Delete Pod web-") {
					t.Errorf("event %q", e)
				}
			}
		})
	}
}

func TestRollingUpdate(t *testing.T) {
	old := newSet("web", 3)
	oldRev := revisionOf(t, old, 1)
	tests := []struct {
		name       string
		opts       []setOpt
		podOpts    map[int][]podOpt
		wantDelete []string
	}{
		{name: "the highest ordinal first", wantDelete: []string{"web-2"}},
		{name: "partition 2 updates only web-2", opts: []setOpt{partitioned(2)}, wantDelete: []string{"web-2"}},
		{name: "partition 3 updates nothing", opts: []setOpt{partitioned(3)}},
		{name: "maxUnavailable 2", opts: []setOpt{maxUnavail(intstr.FromInt32(2))}, wantDelete: []string{"web-1", "web-2"}},
		{name: "maxUnavailable 50% of 3 rounds down to 1", opts: []setOpt{maxUnavail(intstr.FromString("50%"))}, wantDelete: []string{"web-2"}},
		{name: "an unavailable pod uses the budget", podOpts: map[int][]podOpt{0: {notReady()}}},
		{name: "Parallel replaces an unavailable old pod beyond the budget", opts: []setOpt{parallel()},
			podOpts: map[int][]podOpt{0: {notReady()}}, wantDelete: []string{"web-0"}},
		{name: "OnDelete deletes nothing", opts: []setOpt{onDelete()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("web", 3, append([]setOpt{image("img:2")}, tt.opts...)...)
			set.Status.CurrentRevision = oldRev.Name
			var pods []runtime.Object
			for i := range 3 {
				pods = append(pods, podAt(old, i, oldRev.Name, tt.podOpts[i]...))
			}
			f := newFixture(t, append(objs(set, oldRev), pods...)...)
			f.MustSync("ns/web")
			var deleted []string
			for _, a := range f.actions() {
				if n, ok := strings.CutPrefix(a, "delete pods "); ok {
					deleted = append(deleted, n)
				}
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, tt.wantDelete) {
				t.Errorf("deleted %v, want %v", deleted, tt.wantDelete)
			}
			newRev := revisionOf(t, set, 2)
			st, _ := f.lastStatus()
			if st.CurrentRevision != oldRev.Name || st.UpdateRevision != newRev.Name {
				t.Errorf("revisions %s → %s, want %s → %s", st.CurrentRevision, st.UpdateRevision, oldRev.Name, newRev.Name)
			}
			if want := int32(3 - len(tt.wantDelete)); st.CurrentReplicas != want {
				t.Errorf("currentReplicas %d, want %d", st.CurrentReplicas, want)
			}
		})
	}
}

// TestRolloutCompletes: a deleted pod comes back at the update revision; once all are
// updated and ready, the update revision becomes the current one.
func TestRolloutCompletes(t *testing.T) {
	old := newSet("web", 2)
	oldRev := revisionOf(t, old, 1)
	set := newSet("web", 2, image("img:2"))
	set.Status.CurrentRevision = oldRev.Name
	newRev := revisionOf(t, set, 2)
	f := newFixture(t, set, oldRev, newRev, podAt(old, 0, oldRev.Name), podAt(set, 1, newRev.Name))
	f.MustSync("ns/web") // deletes web-0
	f.catchUp()
	f.MustSync("ns/web") // creates web-0 at the update revision
	if p := controllertest.Get[*corev1.Pod](t, f.Client, "ns", "web-0"); podRevision(p) != newRev.Name || p.Spec.Containers[0].Image != "img:2" {
		t.Fatalf("web-0 at %s with %s", podRevision(p), p.Spec.Containers[0].Image)
	}
	f.catchUp()
	f.kubelet(t0, "web-0")
	f.MustSync("ns/web")
	st, _ := f.lastStatus()
	if st.CurrentRevision != newRev.Name || st.UpdateRevision != newRev.Name || st.CurrentReplicas != 2 || st.UpdatedReplicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 {
		t.Errorf("status %+v", st)
	}
}

// TestRollbackRenumbers: a template back at an earlier revision's (kubectl rollout undo)
// renumbers that revision instead of recording a new one.
func TestRollbackRenumbers(t *testing.T) {
	v1 := newSet("web", 1)
	r1 := revisionOf(t, v1, 1)
	r2 := revisionOf(t, newSet("web", 1, image("img:2")), 2)
	f := newFixture(t, v1, r1, r2, podAt(v1, 0, r1.Name))
	f.MustSync("ns/web")
	if got := f.actions(); !slices.Contains(got, "update controllerrevisions "+r1.Name) {
		t.Fatalf("actions %v, want the update of %s", got, r1.Name)
	}
	if r := controllertest.Get[*appsv1.ControllerRevision](t, f.Client, "ns", r1.Name); r.Revision != 3 {
		t.Errorf("%s is revision %d, want 3", r1.Name, r.Revision)
	}
	if n := controllertest.Count(f.Client, "create", "controllerrevisions"); n != 0 {
		t.Errorf("%d revisions created", n)
	}
}

func TestHistoryLimit(t *testing.T) {
	set := newSet("web", 1, image("img:9"), historyLimit(1))
	cur := revisionOf(t, set, 4)
	var revs []runtime.Object
	for i, img := range []string{"img:1", "img:2", "img:3"} {
		revs = append(revs, revisionOf(t, newSet("web", 1, image(img)), int64(i+1)))
	}
	f := newFixture(t, append(append(objs(set, cur), revs...), podAt(set, 0, cur.Name))...)
	f.MustSync("ns/web")
	var deleted []string
	for _, a := range f.actions() {
		if n, ok := strings.CutPrefix(a, "delete controllerrevisions "); ok {
			deleted = append(deleted, n)
		}
	}
	want := []string{revs[0].(*appsv1.ControllerRevision).Name, revs[1].(*appsv1.ControllerRevision).Name}
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want the two oldest %v", deleted, want)
	}
}

func TestAdoptionAndRelease(t *testing.T) {
	set := newSet("web", 1)
	rev := revisionOf(t, set, 1)
	orphanRev := rev.DeepCopy()
	orphanRev.OwnerReferences = nil
	orphan := podAt(set, 0, rev.Name)
	orphan.OwnerReferences = nil
	namedOtherwise := podAt(set, 1, rev.Name)
	namedOtherwise.OwnerReferences = nil
	namedOtherwise.Name = "other-1"
	released := podAt(set, 1, rev.Name)
	released.Labels = map[string]string{"app": "other"}
	f := newFixture(t, set, orphanRev, orphan, namedOtherwise, released)
	f.MustSync("ns/web")
	got := f.actions()
	for _, want := range []string{"patch controllerrevisions " + rev.Name, "patch pods web-0", "patch pods web-1"} {
		if !slices.Contains(got, want) {
			t.Errorf("actions %v lack %q", got, want)
		}
	}
	if slices.Contains(got, "patch pods other-1") {
		t.Error("a pod not named after the set was adopted")
	}
	if p := controllertest.Get[*corev1.Pod](t, f.Client, "ns", "web-1"); metav1.GetControllerOf(p) != nil {
		t.Errorf("web-1 still controlled: %v", p.OwnerReferences)
	}
}

func TestClaims(t *testing.T) {
	set := newSet("web", 2, parallel(), withClaims("data"), retention(del, del))
	f := newFixture(t, set)
	f.MustSync("ns/web")
	pvcs := controllertest.Stored[*corev1.PersistentVolumeClaim](t, f.Client, "ns")
	if len(pvcs) != 2 || pvcs[0].Name != "data-web-0" || pvcs[1].Name != "data-web-1" || pvcs[0].Labels["app"] != "web" {
		t.Fatalf("claims %v", pvcs)
	}
	pod := controllertest.Get[*corev1.Pod](t, f.Client, "ns", "web-0")
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data-web-0" {
		t.Errorf("volumes %v", pod.Spec.Volumes)
	}
	reasons := f.EventReasons()
	if reasons["Normal SuccessfulCreate"] != 4 {
		t.Errorf("events %v, want 2 claim and 2 pod creations", reasons)
	}
	// Once cached, the claims get the set as controller (whenDeleted: Delete).
	f.catchUp()
	f.kubelet(t0, "web-0", "web-1")
	f.MustSync("ns/web")
	for _, n := range []string{"data-web-0", "data-web-1"} {
		c := controllertest.Get[*corev1.PersistentVolumeClaim](t, f.Client, "ns", n)
		if !metav1.IsControlledBy(c, set) {
			t.Errorf("%s owners %v, want the set", n, c.OwnerReferences)
		}
	}
	// Scaled down to 1 (whenScaled: Delete): web-1's claim is handed to the pod before
	// the pod is deleted.
	f.catchUp()
	scaled := f.apiSet("web")
	scaled.Spec.Replicas = ptrTo(int32(1))
	if err := f.Client.Tracker().Update(setsGVR, scaled, "ns"); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	f.MustSync("ns/web")
	c := controllertest.Get[*corev1.PersistentVolumeClaim](t, f.Client, "ns", "data-web-1")
	if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Kind != "Pod" || c.OwnerReferences[0].Name != "web-1" {
		t.Errorf("data-web-1 owners %v, want pod web-1", c.OwnerReferences)
	}
	if !slices.Contains(f.actions(), "delete pods web-1") {
		t.Errorf("web-1 not deleted: %v", f.actions())
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestMinReadySeconds(t *testing.T) {
	set := newSet("web", 2, parallel(), minReady(10))
	rev := revisionOf(t, set, 1)
	p0 := podAt(set, 0, rev.Name)
	p1 := podAt(set, 1, rev.Name)
	p1.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-4 * time.Second))
	f := newFixture(t, set, rev, p0, p1)
	f.MustSync("ns/web")
	st, _ := f.lastStatus()
	if st.ReadyReplicas != 2 || st.AvailableReplicas != 1 {
		t.Errorf("ready %d available %d, want 2 and 1", st.ReadyReplicas, st.AvailableReplicas)
	}
	if d, ok := f.Queue.After("ns/web"); !ok || d != 6*time.Second {
		t.Errorf("requeued after %v (%v), want 6s", d, ok)
	}
}

func TestFailedPodIsReplaced(t *testing.T) {
	set := newSet("web", 1)
	rev := revisionOf(t, set, 1)
	f := newFixture(t, set, rev, podAt(set, 0, rev.Name, phase(corev1.PodFailed)))
	f.MustSync("ns/web")
	if got := f.actions(); !slices.Contains(got, "delete pods web-0") {
		t.Fatalf("actions %v", got)
	}
	f.catchUp()
	f.MustSync("ns/web")
	if got := f.podNames(); !slices.Equal(got, []string{"web-0"}) {
		t.Errorf("pods %v", got)
	}
}

// TestNoOrdinalCreatedTwice: a namespace's next owner whose pod cache lags behind the API
// server (web-0 exists but is not cached) tries to create web-0 again; the API server
// refuses, and nothing is counted or recorded as created.
func TestNoOrdinalCreatedTwice(t *testing.T) {
	set := newSet("web", 2)
	rev := revisionOf(t, set, 1)
	f := newFixture(t, set, rev, podAt(set, 0, rev.Name))
	f.Uncache(podAt(set, 0, rev.Name))
	err := f.Sync("ns/web")
	if !apierrors.IsAlreadyExists(err) && (err == nil || !strings.Contains(err.Error(), "already exists")) {
		t.Fatalf("sync error %v, want AlreadyExists", err)
	}
	if got := f.podNames(); !slices.Equal(got, []string{"web-0"}) {
		t.Errorf("pods %v", got)
	}
	if r := f.EventReasons(); r["Normal SuccessfulCreate"] != 0 {
		t.Errorf("events %v", r)
	}
}

func TestRecreateStrategyIsRefused(t *testing.T) {
	set := newSet("web", 1)
	set.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RecreateStatefulSetStrategyType}
	f := newFixture(t, set)
	if err := f.Sync("ns/web"); err == nil {
		t.Fatal("sync succeeded")
	}
	want := "Warning UnknownStrategy statefulset ns/web uses Recreate strategy but feature gate StatefulSetRecreateStrategy is disabled"
	if got := f.Events(); !slices.Equal(got, []string{want}) {
		t.Errorf("events %v, want %q", got, want)
	}
	if _, ok := f.lastStatus(); ok {
		t.Error("status written")
	}
}

func TestDeletedSetIsForgotten(t *testing.T) {
	f := newFixture(t)
	f.MustSync("ns/gone")
	if got := f.actions(); len(got) != 0 {
		t.Errorf("actions %v", got)
	}
}
