package deployment

import (
	"fmt"
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
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
)

// TestScale resizes a Deployment whose ReplicaSets were sized for an earlier replica
// count (their desired/max-replicas annotations say so): the new size is spread in
// proportion, leftovers to the largest ReplicaSet.
func TestScale(t *testing.T) {
	type rsSpec struct {
		name string
		size int32
		age  time.Duration
		new  bool
	}
	tests := []struct {
		name                   string
		from, to               int32
		surgeFrom, surgeTo     int32
		rss                    []rsSpec
		want                   map[string]int32
		wantEvents             []string
		recreateStrategyTarget bool
	}{
		{name: "one ReplicaSet: 10 -> 12", from: 10, to: 12, rss: []rsSpec{{"v1", 10, time.Minute, true}},
			want: map[string]int32{"v1": 12}, wantEvents: []string{"Normal ScalingReplicaSet Scaled up replica set d-v1 from 10 to 12"}},
		{name: "one ReplicaSet: 10 -> 5", from: 10, to: 5, rss: []rsSpec{{"v1", 10, time.Minute, true}},
			want: map[string]int32{"v1": 5}, wantEvents: []string{"Normal ScalingReplicaSet Scaled down replica set d-v1 from 10 to 5"}},
		{name: "proportional 5 -> 10", from: 5, to: 10, rss: []rsSpec{{"v2", 2, time.Minute, true}, {"v1", 3, time.Hour, false}},
			want: map[string]int32{"v2": 4, "v1": 6}},
		{name: "proportional 5 -> 3", from: 5, to: 3, rss: []rsSpec{{"v2", 2, time.Minute, true}, {"v1", 3, time.Hour, false}},
			want: map[string]int32{"v2": 1, "v1": 2}},
		{name: "proportional 9 -> 4", from: 9, to: 4, rss: []rsSpec{{"v2", 8, time.Minute, true}, {"v1", 1, time.Hour, false}},
			want: map[string]int32{"v2": 4, "v1": 0}},
		{name: "proportional 7 -> 10, three ReplicaSets", from: 7, to: 10,
			rss:  []rsSpec{{"v3", 2, time.Minute, true}, {"v2", 3, time.Hour, false}, {"v1", 2, 2 * time.Hour, false}},
			want: map[string]int32{"v3": 3, "v2": 4, "v1": 3}},
		{name: "proportional 13 -> 8", from: 13, to: 8,
			rss:  []rsSpec{{"v3", 2, time.Minute, true}, {"v2", 8, time.Hour, false}, {"v1", 3, 2 * time.Hour, false}},
			want: map[string]int32{"v3": 1, "v2": 5, "v1": 2}},
		{name: "leftover of growth to the newest of equals: 3 -> 4", from: 3, to: 4,
			rss:  []rsSpec{{"v3", 1, time.Minute, true}, {"v2", 1, time.Hour, false}, {"v1", 1, 2 * time.Hour, false}},
			want: map[string]int32{"v3": 2, "v2": 1, "v1": 1}},
		{name: "leftover of shrinking from the oldest of equals: 3 -> 2", from: 3, to: 2,
			rss:  []rsSpec{{"v3", 1, time.Minute, true}, {"v2", 1, time.Hour, false}, {"v1", 1, 2 * time.Hour, false}},
			want: map[string]int32{"v3": 1, "v2": 1, "v1": 0}},
		{name: "no new ReplicaSet: 4 -> 5", from: 4, to: 5, rss: []rsSpec{{"v2", 2, time.Hour, false}, {"v1", 2, 2 * time.Hour, false}},
			want: map[string]int32{"v2": 3, "v1": 2}},
		{name: "to zero", from: 6, to: 0,
			rss:  []rsSpec{{"v3", 3, time.Minute, true}, {"v2", 2, time.Hour, false}, {"v1", 1, 2 * time.Hour, false}},
			want: map[string]int32{"v3": 0, "v2": 0, "v1": 0}},
		{name: "with surge pods: 10 -> 20", from: 10, to: 20, surgeFrom: 2, surgeTo: 2,
			rss:  []rsSpec{{"v2", 6, time.Minute, true}, {"v1", 6, time.Hour, false}},
			want: map[string]int32{"v2": 11, "v1": 11}},
		{name: "surge and size change: 10+3 -> 50+6", from: 10, to: 50, surgeFrom: 3, surgeTo: 6,
			rss:  []rsSpec{{"v2", 5, time.Minute, true}, {"v1", 8, time.Hour, false}},
			want: map[string]int32{"v2": 22, "v1": 34}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := withStrategy(newDeployment("d", tt.from), intstr.FromInt32(tt.surgeFrom), intstr.FromInt32(0))
			d := withStrategy(newDeployment("d", tt.to), intstr.FromInt32(tt.surgeTo), intstr.FromInt32(0))
			var newRS *appsv1.ReplicaSet
			var old []*appsv1.ReplicaSet
			objs := []runtime.Object{d}
			for i, s := range tt.rss {
				var rs *appsv1.ReplicaSet
				if s.new {
					rs = newReplicaSet(before, s.name, s.size, s.age, len(tt.rss)-i)
					newRS = rs
				} else {
					rs = oldReplicaSet(before, s.name, s.size, s.age, len(tt.rss)-i)
					old = append(old, rs)
				}
				objs = append(objs, rs)
			}
			f := newFixture(t, objs...)
			if err := f.ctrl.scale(f.TestContext(), d, newRS, old); err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				rs := f.replicaSet("d-" + name)
				if got := *rs.Spec.Replicas; got != want {
					t.Errorf("d-%s: %d replicas, want %d", name, got, want)
				}
				if *rs.Spec.Replicas > 0 || slices.Contains(f.writes(), "update replicasets d-"+name) {
					if got := rs.Annotations[DesiredReplicasAnnotation]; got != fmt.Sprint(tt.to) {
						t.Errorf("d-%s: desired-replicas %q, want %d", name, got, tt.to)
					}
					if got := rs.Annotations[MaxReplicasAnnotation]; got != fmt.Sprint(tt.to+tt.surgeTo) {
						t.Errorf("d-%s: max-replicas %q, want %d", name, got, tt.to+tt.surgeTo)
					}
				}
			}
			if tt.wantEvents != nil {
				if got := f.Events(); !slices.Equal(got, tt.wantEvents) {
					t.Errorf("events = %q, want %q", got, tt.wantEvents)
				}
			}
		})
	}
}

// TestResizeDuringRollout checks that a sync recognises a resize (desired-replicas
// differs from spec.replicas) and scales instead of stepping the rollout.
func TestResizeDuringRollout(t *testing.T) {
	before := withStrategy(newDeployment("d", 5), intstr.FromInt32(0), intstr.FromInt32(1))
	d := synced(withStrategy(newDeployment("d", 10), intstr.FromInt32(0), intstr.FromInt32(1)), "2")
	d.Generation = 2
	old := oldReplicaSet(before, "a", 3, time.Hour, 1)
	cur := newReplicaSet(before, "b", 2, time.Minute, 2)
	f := newFixture(t, d, old, cur)
	f.mustSync("d")
	if a, b := *f.replicaSet("d-a").Spec.Replicas, *f.replicaSet("d-b").Spec.Replicas; a != 6 || b != 4 {
		t.Errorf("sizes after resize 5 -> 10: old %d new %d, want 6 and 4", a, b)
	}
	if got := f.deployment("d").Status.ObservedGeneration; got != 2 {
		t.Errorf("observedGeneration = %d, want 2", got)
	}
}

func TestCreateNewReplicaSet(t *testing.T) {
	d := withStrategy(newDeployment("web", 3), intstr.FromInt32(1), intstr.FromInt32(0))
	d.Annotations["kubernetes.io/change-cause"] = "kubectl set image"
	d.Annotations[corev1.LastAppliedConfigAnnotation] = "{}"
	d.Spec.MinReadySeconds = 5
	f := newFixture(t, d)
	f.mustSync("web")

	hash := templatehash.Compute(&d.Spec.Template, nil)
	rs := f.replicaSet("web-" + hash)
	checks := []struct {
		name      string
		got, want any
	}{
		{"replicas (first rollout: all at once)", *rs.Spec.Replicas, int32(3)},
		{"template hash label", rs.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey], hash},
		{"object hash label", rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey], hash},
		{"selector", rs.Spec.Selector.MatchLabels, map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash}},
		{"owner", metav1.GetControllerOf(rs).UID, d.UID},
		{"minReadySeconds", rs.Spec.MinReadySeconds, int32(5)},
		{"revision", rs.Annotations[RevisionAnnotation], "1"},
		{"desired-replicas", rs.Annotations[DesiredReplicasAnnotation], "3"},
		{"max-replicas", rs.Annotations[MaxReplicasAnnotation], "4"},
		{"change-cause copied", rs.Annotations["kubernetes.io/change-cause"], "kubectl set image"},
		{"last-applied not copied", rs.Annotations[corev1.LastAppliedConfigAnnotation], ""},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	got := f.deployment("web")
	if got.Annotations[RevisionAnnotation] != "1" {
		t.Errorf("deployment revision = %q, want 1", got.Annotations[RevisionAnnotation])
	}
	if c := getCondition(got.Status, appsv1.DeploymentProgressing); c == nil || c.Reason != ReasonNewReplicaSetCreated ||
		c.Message != fmt.Sprintf("Created new replica set %q", rs.Name) {
		t.Errorf("Progressing = %+v, want NewReplicaSetCreated", c)
	}
	want := []string{"Normal ScalingReplicaSet Scaled up replica set " + rs.Name + " from 0 to 3"}
	if ev := f.Events(); !slices.Equal(ev, want) {
		t.Errorf("events = %q, want %q", ev, want)
	}
}

// TestCollision: the new ReplicaSet's name is taken. By our own ReplicaSet with our
// template (the cache lagged), it is used; by another, collisionCount goes up and the
// error retries the sync with the next hash.
func TestCollision(t *testing.T) {
	tests := []struct {
		name          string
		sameTemplate  bool
		wantErr       bool
		wantCollision *int32
	}{
		{name: "own ReplicaSet, cache lagging", sameTemplate: true},
		{name: "another template under the name", wantErr: true, wantCollision: ptr.To[int32](1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 2)
			hash := templatehash.Compute(&d.Spec.Template, nil)
			taken := newReplicaSet(d, hash, 2, time.Minute, 1)
			if !tt.sameTemplate {
				taken.Spec.Template.Spec.Containers[0].Image = "someone-else"
			}
			f := newFixture(t, d)
			f.Cache(taken)
			// The lister sees it only for the conflict check: the claim step must not,
			// so it is served from the cache after the create fails.
			f.Client.PrependReactor("create", "replicasets", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewAlreadyExists(appsv1.Resource("replicasets"), taken.Name)
			})
			rss := []*appsv1.ReplicaSet{}
			_, err := f.ctrl.newReplicaSet(f.TestContext(), d, nil, rss, true)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			got := f.deployment("d").Status.CollisionCount
			if !ptr.Equal(got, tt.wantCollision) {
				t.Errorf("collisionCount = %v, want %v", ptr.Deref(got, -1), ptr.Deref(tt.wantCollision, -1))
			}
			if tt.wantCollision != nil && templatehash.Compute(&d.Spec.Template, got) == hash {
				t.Error("the next attempt would use the same hash")
			}
		})
	}
}

func TestCleanupDeployment(t *testing.T) {
	tests := []struct {
		name        string
		limit       *int32
		old         func(d *appsv1.Deployment) []*appsv1.ReplicaSet
		wantDeleted []string
	}{
		{name: "within the limit", limit: ptr.To[int32](2), old: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
			return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 0, 2*time.Hour, 1), oldReplicaSet(d, "b", 0, time.Hour, 2)}
		}},
		{name: "lowest revisions go first", limit: ptr.To[int32](1), old: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
			return []*appsv1.ReplicaSet{oldReplicaSet(d, "c", 0, 3*time.Hour, 3), oldReplicaSet(d, "a", 0, 2*time.Hour, 1), oldReplicaSet(d, "b", 0, time.Hour, 2)}
		}, wantDeleted: []string{"delete replicasets d-a", "delete replicasets d-b"}},
		{name: "limit 0 deletes all scaled-down ones", limit: ptr.To[int32](0), old: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
			return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 0, 2*time.Hour, 1), oldReplicaSet(d, "b", 0, time.Hour, 2)}
		}, wantDeleted: []string{"delete replicasets d-a", "delete replicasets d-b"}},
		{name: "ReplicaSets with pods, desired pods or stale status stay", limit: ptr.To[int32](0), old: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
			withPods := oldReplicaSet(d, "a", 0, 4*time.Hour, 1)
			withPods.Status.Replicas = 1
			stale := oldReplicaSet(d, "b", 0, 3*time.Hour, 2)
			stale.Generation = 2
			deleting := oldReplicaSet(d, "c", 0, 2*time.Hour, 3)
			deleting.DeletionTimestamp = &metav1.Time{Time: now}
			return []*appsv1.ReplicaSet{withPods, stale, deleting, oldReplicaSet(d, "d", 1, time.Hour, 4), oldReplicaSet(d, "e", 0, time.Minute, 5)}
		}, wantDeleted: []string{"delete replicasets d-e"}},
		{name: "no limit", limit: nil, old: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
			return []*appsv1.ReplicaSet{oldReplicaSet(d, "a", 0, 2*time.Hour, 1)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 1)
			d.Spec.RevisionHistoryLimit = tt.limit
			old := tt.old(d)
			objs := []runtime.Object{d}
			for _, rs := range old {
				objs = append(objs, rs)
			}
			f := newFixture(t, objs...)
			if err := f.ctrl.cleanupDeployment(f.TestContext(), old, d); err != nil {
				t.Fatal(err)
			}
			if got := f.writes(); !slices.Equal(got, tt.wantDeleted) {
				t.Errorf("writes = %q, want %q", got, tt.wantDeleted)
			}
		})
	}
}

func TestCalculateStatus(t *testing.T) {
	d := newDeployment("d", 4)
	d.Generation = 3
	d.Status.CollisionCount = ptr.To[int32](2)
	tests := []struct {
		name string
		rss  func() (*appsv1.ReplicaSet, []*appsv1.ReplicaSet)
		want appsv1.DeploymentStatus
		// wantAvailable is the Available condition's reason.
		wantAvailable string
	}{
		{
			name: "rollout half way",
			rss: func() (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
				n := withAvailable(newReplicaSet(d, "n", 2, 0, 2), 1)
				n.Status.TerminatingReplicas = ptr.To[int32](0)
				o := oldReplicaSet(d, "o", 2, time.Hour, 1)
				o.Status.Replicas = 3
				o.Status.TerminatingReplicas = ptr.To[int32](1)
				return n, []*appsv1.ReplicaSet{o}
			},
			want: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 5, UpdatedReplicas: 2, ReadyReplicas: 3,
				AvailableReplicas: 3, UnavailableReplicas: 1, TerminatingReplicas: ptr.To[int32](1), CollisionCount: ptr.To[int32](2)},
			wantAvailable: ReasonMinimumAvailable,
		},
		{
			name: "below minimum; a ReplicaSet observed without terminatingReplicas makes it unknown",
			rss: func() (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
				n := withAvailable(newReplicaSet(d, "n", 4, 0, 2), 2)
				n.Status.TerminatingReplicas = nil
				return n, nil
			},
			want: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 2,
				AvailableReplicas: 2, UnavailableReplicas: 2, CollisionCount: ptr.To[int32](2)},
			wantAvailable: ReasonMinimumUnavailable,
		},
		{
			name: "no new ReplicaSet; one never observed counts 0 terminating",
			rss: func() (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
				o := oldReplicaSet(d, "o", 4, time.Hour, 1)
				o.Status = appsv1.ReplicaSetStatus{}
				return nil, []*appsv1.ReplicaSet{o}
			},
			want: appsv1.DeploymentStatus{ObservedGeneration: 3, UnavailableReplicas: 4, TerminatingReplicas: ptr.To[int32](0),
				CollisionCount: ptr.To[int32](2)},
			wantAvailable: ReasonMinimumUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			newRS, old := tt.rss()
			got := f.ctrl.calculateStatus(append(old, newRS), newRS, d)
			cond := getCondition(got, appsv1.DeploymentAvailable)
			if cond == nil || cond.Reason != tt.wantAvailable {
				t.Errorf("Available = %+v, want reason %s", cond, tt.wantAvailable)
			}
			got.Conditions = nil
			if statusString(got) != statusString(tt.want) {
				t.Errorf("status = %s\nwant %s", statusString(got), statusString(tt.want))
			}
		})
	}
}

func statusString(s appsv1.DeploymentStatus) string {
	return strings.Join([]string{
		fmt.Sprint("gen=", s.ObservedGeneration), fmt.Sprint("replicas=", s.Replicas), fmt.Sprint("updated=", s.UpdatedReplicas),
		fmt.Sprint("ready=", s.ReadyReplicas), fmt.Sprint("available=", s.AvailableReplicas), fmt.Sprint("unavailable=", s.UnavailableReplicas),
		fmt.Sprint("terminating=", ptr.Deref(s.TerminatingReplicas, -1)), fmt.Sprint("collisions=", ptr.Deref(s.CollisionCount, -1)),
	}, " ")
}

// TestPaused: a paused Deployment with a new template gets no new ReplicaSet, but is
// still resized and cleaned up.
func TestPaused(t *testing.T) {
	before := newDeployment("d", 2)
	d := synced(withImage(newDeployment("d", 4), "image:2"), "2")
	d.Spec.Paused = true
	d.Spec.RevisionHistoryLimit = ptr.To[int32](1)
	cur := oldReplicaSet(before, "b", 2, time.Hour, 2)
	gone := oldReplicaSet(before, "a", 0, 2*time.Hour, 1)
	f := newFixture(t, d, cur, gone)
	f.mustSync("d")
	want := []string{"update deployments/status d", "update replicasets d-b", "delete replicasets d-a", "update deployments/status d"}
	if got := f.writes(); !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
	if c := getCondition(f.deployment("d").Status, appsv1.DeploymentProgressing); c == nil || c.Reason != ReasonPaused || c.Status != corev1.ConditionUnknown {
		t.Errorf("Progressing = %+v, want Unknown DeploymentPaused", c)
	}
	if got := *f.replicaSet("d-b").Spec.Replicas; got != 4 {
		t.Errorf("replicas = %d, want 4", got)
	}
}

// TestStatusWritesDoNotConflict runs a first rollout against an API that enforces
// resourceVersions: the sync writes the status twice (revision and condition of the new
// ReplicaSet, then the rollout status) and the second must not be refused as stale.
func TestStatusWritesDoNotConflict(t *testing.T) {
	d := newDeployment("d", 2)
	d.ResourceVersion = "1"
	f := newFixture(t, d)
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	f.Client.PrependReactor("update", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		obj := a.(core.UpdateAction).GetObject().(*appsv1.Deployment).DeepCopy()
		cur, err := f.Client.Tracker().Get(gvr, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		rv := cur.(*appsv1.Deployment).ResourceVersion
		if obj.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), obj.Name, fmt.Errorf("stale resourceVersion %s, now %s", obj.ResourceVersion, rv))
		}
		var n int
		fmt.Sscan(rv, &n)
		obj.ResourceVersion = fmt.Sprint(n + 1)
		return true, obj, f.Client.Tracker().Update(gvr, obj, obj.Namespace)
	})
	f.mustSync("d")
	if got := f.writes(); len(got) < 3 || got[0] != "create replicasets "+replicaSetName("d", templatehash.Compute(&d.Spec.Template, nil)) {
		t.Errorf("writes = %q, want the create and two status writes", got)
	}
	if got := f.deployment("d").ResourceVersion; got != "3" {
		t.Errorf("resourceVersion = %s, want 3 after two status writes", got)
	}
}
