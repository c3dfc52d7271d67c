package job

import (
	"context"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func managedBy(v string) jobOpt { return func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To(v) } }

// TestManagedBy: which Jobs each mode works.
func TestManagedBy(t *testing.T) {
	tests := []struct {
		name      string
		mode      string
		managedBy *string
		want      bool
	}{
		{name: "takeover: unset", mode: ManagedByUpstream, want: true},
		{name: "takeover: upstream's value", mode: ManagedByUpstream, managedBy: ptr.To(ManagedByUpstream), want: true},
		{name: "takeover: kshard's value", mode: ManagedByUpstream, managedBy: ptr.To(ManagedByKShard), want: false},
		{name: "takeover: kueue", mode: ManagedByUpstream, managedBy: ptr.To("kueue.x-k8s.io/multikueue"), want: false},
		{name: "beside upstream: unset", mode: ManagedByKShard, want: false},
		{name: "beside upstream: upstream's value", mode: ManagedByKShard, managedBy: ptr.To(ManagedByUpstream), want: false},
		{name: "beside upstream: kshard's value", mode: ManagedByKShard, managedBy: ptr.To(ManagedByKShard), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(1, 1)
			j.Spec.ManagedBy = tc.managedBy
			f := newFixtureWith(t, Options{ManagedBy: tc.mode}, j)
			f.MustSync("ns/job")
			if worked := len(f.createdPods()) > 0; worked != tc.want {
				t.Errorf("worked %v, want %v", worked, tc.want)
			}
		})
	}
	t.Run("bad flag", func(t *testing.T) {
		f := newFixture(t)
		if _, err := newController(f.ControllerContext(), Options{ManagedBy: "x"}, f.clock); err == nil {
			t.Error("accepted --job-managed-by=x")
		}
	})
}

// TestOrphans: finalizers of pods no running Job of this controller owns are removed,
// pods of Jobs managed by someone else are left alone.
func TestOrphans(t *testing.T) {
	tests := []struct {
		name string
		job  *batchv1.Job
		pod  *corev1.Pod
		want bool // finalizer removed
	}{
		{name: "owner gone", pod: newPod("a"), want: true},
		{name: "no owner", pod: newPod("a", func(p *corev1.Pod) { p.OwnerReferences = nil }), want: true},
		{name: "owner finished", job: newJob(1, 1, withStatus(batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}})), pod: newPod("a"), want: true},
		{name: "owner running", job: newJob(1, 1), pod: newPod("a"), want: false},
		{name: "owner managed by someone else", job: newJob(1, 1, managedBy("kueue.x-k8s.io/multikueue"), withStatus(batchv1.JobStatus{
			Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}})), pod: newPod("a"), want: false},
		{name: "owner not a job", pod: newPod("a", func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "ReplicaSet" }), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f *fixture
			if tc.job != nil {
				f = newFixture(t, tc.job, tc.pod)
			} else {
				f = newFixture(t, tc.pod)
			}
			f.ctrl.enqueueOrphan(tc.pod)
			for _, key := range f.orphans().Keys() {
				if err := f.ctrl.syncOrphan(context.Background(), key); err != nil {
					t.Fatalf("sync of orphan %s: %v", key, err)
				}
			}
			removed := !hasTrackingFinalizer(f.apiPods()[0])
			if removed != tc.want {
				t.Errorf("finalizer removed %v, want %v", removed, tc.want)
			}
		})
	}
}

// TestFinishedJobsPodsQueuedForCleanup: when a Job finishes or is deleted, its matching
// pods that still carry the tracking finalizer go into the orphan-pod queue (one key per
// pod, as upstream's cleanupPodFinalizers queues them), and their syncs remove it.
func TestFinishedJobsPodsQueuedForCleanup(t *testing.T) {
	done := withStatus(batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}})
	for _, tc := range []struct {
		name  string
		event func(f *fixture, job *batchv1.Job)
	}{
		{name: "finished", event: func(f *fixture, job *batchv1.Job) { f.ctrl.updateJob(f0(), newJob(1, 1), job) }},
		{name: "deleted", event: func(f *fixture, job *batchv1.Job) { f.ctrl.deleteJob(f0(), job) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(1, 1, done)
			other := newPod("other", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "x"} })
			f := newFixture(t, job, newPod("a", succeeded()), newPod("b", succeeded(), untracked), other)
			tc.event(f, job)
			keys := f.orphans().Keys()
			if !slices.Equal(keys, []string{"ns/a"}) {
				t.Fatalf("orphan-pod queue holds %v, want [ns/a] (the matching pod with the finalizer)", keys)
			}
			for _, key := range keys {
				if err := f.ctrl.syncOrphan(context.Background(), key); err != nil {
					t.Fatalf("sync of orphan %s: %v", key, err)
				}
			}
			for _, p := range f.apiPods() {
				if tracked, want := hasTrackingFinalizer(p), p.Name == "other"; tracked != want {
					t.Errorf("pod %s: tracking finalizer %v, want %v", p.Name, tracked, want)
				}
			}
		})
	}
}

// TestAdoption: a matching orphan is adopted with the tracking finalizer.
func TestAdoption(t *testing.T) {
	orphan := newPod("a", untracked, func(p *corev1.Pod) { p.OwnerReferences = nil })
	f := newFixture(t, newJob(1, 1), orphan)
	f.MustSync("ns/job")
	p := f.apiPods()[0]
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != "uid-job" || !hasTrackingFinalizer(p) {
		t.Errorf("adopted pod: owners %v finalizers %v", p.OwnerReferences, p.Finalizers)
	}
	if len(f.createdPods()) != 0 || f.apiJob("job").Status.Active != 1 {
		t.Errorf("created %d, active %d", len(f.createdPods()), f.apiJob("job").Status.Active)
	}
}

// TestHandlers: which keys pod and Job events queue, and the expectations they observe.
func TestHandlers(t *testing.T) {
	f := newFixture(t, newJob(2, 2))
	log := f.ctrl.logForTest()
	f.ctrl.expectations.ExpectCreations("ns/job", 1)
	f.ctrl.addPod(log, newPod("a"))
	if !f.ctrl.expectations.Satisfied("ns/job") {
		t.Error("creation not observed")
	}
	if d, ok := f.Queue.After("ns/job"); !ok || d != syncBatchPeriod {
		t.Errorf("pod add queued after %v %v, want the batch period", d, ok)
	}
	old := newPod("a")
	cur := newPod("a", untracked, succeeded())
	cur.ResourceVersion = "2"
	f.ctrl.finalizers.expectRemoved("ns/job", []typesUID{"uid-a"})
	f.ctrl.updatePod(log, old, cur)
	if f.ctrl.finalizers.expected("ns/job").Has("uid-a") {
		t.Error("finalizer removal not observed")
	}
	f.ctrl.expectations.ExpectDeletions("ns/job", 1)
	del := newPod("a", deleting)
	del.ResourceVersion = "3"
	f.ctrl.updatePod(log, old, del)
	if !f.ctrl.expectations.Satisfied("ns/job") {
		t.Error("graceful deletion not observed as a deletion")
	}
	// A spec change syncs at once.
	j2 := newJob(3, 2)
	j2.Generation = 2
	f.ctrl.updateJob(log, newJob(2, 2), j2)
	if keys := f.Queue.Keys(); !slices.Contains(keys, "ns/job") {
		t.Errorf("spec change not queued at once: %v", keys)
	}
}

func TestIndexSet(t *testing.T) {
	log := f0()
	tests := []struct {
		in    string
		add   []int
		want  string
		total int
	}{
		{in: "", add: []int{0, 1, 2, 5}, want: "0-2,5", total: 4},
		{in: "1,3-5", add: []int{2}, want: "1-5", total: 5},
		{in: "0,2", add: []int{4}, want: "0,2,4", total: 3},
		{in: "3,4", want: "3,4", total: 2},
		{in: "1-20", want: "1-9", total: 9}, // completions 10
		{in: "x,2", want: "2", total: 1},
	}
	for _, tc := range tests {
		s := parseIndexes(log, tc.in, 10).with(tc.add)
		if s.String() != tc.want || s.total() != tc.total {
			t.Errorf("%q + %v = %q (%d), want %q (%d)", tc.in, tc.add, s.String(), s.total(), tc.want, tc.total)
		}
	}
	if s := parseIndexes(log, "1,3-5", 10); !s.has(4) || s.has(2) || s.has(6) {
		t.Errorf("has wrong on %v", s)
	}
}
