package daemonset

import (
	"fmt"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// TestRevisionData: the data are {"spec":{"template":{...,"$patch":"replace"}}} with
// sorted keys, what `kubectl rollout undo` patches back.
func TestRevisionData(t *testing.T) {
	ds := newDS("ds")
	got, err := revisionData(ds)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"agent"}},"spec":{"containers":[{"image":"img:1","name":"c","resources":{}}]}}}}`
	if string(got) != want {
		t.Errorf("data\n%s\nwant\n%s", got, want)
	}
}

func TestConstructHistory(t *testing.T) {
	v1, v2 := newDS("ds"), newDS("ds", withImage("img:2"))
	tests := []struct {
		name        string
		ds          *appsv1.DaemonSet
		revs        []*appsv1.ControllerRevision
		wantWrites  []string
		wantCurrent string
		wantNumber  int64
	}{
		{name: "first revision created", ds: v1,
			wantWrites: []string{"create controllerrevisions"}, wantCurrent: "ds-" + hashOf(v1), wantNumber: 1},
		{name: "a template change gets the next number", ds: v2, revs: []*appsv1.ControllerRevision{rev(t, v1, 1)},
			wantWrites: []string{"create controllerrevisions"}, wantCurrent: "ds-" + hashOf(v2), wantNumber: 2},
		{name: "a rollback renumbers the old template's revision", ds: v1,
			revs:       []*appsv1.ControllerRevision{rev(t, v1, 1), rev(t, v2, 2)},
			wantWrites: []string{"update controllerrevisions"}, wantCurrent: "ds-" + hashOf(v1), wantNumber: 1},
		{name: "an orphan revision of the template is adopted", ds: v1,
			revs:       []*appsv1.ControllerRevision{orphan(rev(t, v1, 1))},
			wantWrites: []string{"patch controllerrevisions ds-" + hashOf(v1)}, wantCurrent: "ds-" + hashOf(v1), wantNumber: 1},
		{name: "a revision without the hash label gets its name as hash", ds: v2,
			revs:       []*appsv1.ControllerRevision{unlabelled(rev(t, v1, 1))},
			wantWrites: []string{"update controllerrevisions", "create controllerrevisions"}, wantCurrent: "ds-" + hashOf(v2), wantNumber: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os := []runtime.Object{tt.ds}
			for _, r := range tt.revs {
				os = append(os, r)
			}
			f := newFixture(t, os...)
			cur, _, err := f.ctrl.constructHistory(f.TestContext(), tt.ds)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.actions(); !reflect.DeepEqual(got, tt.wantWrites) {
				t.Errorf("writes %v, want %v", got, tt.wantWrites)
			}
			if cur.Name != tt.wantCurrent || cur.Revision != tt.wantNumber {
				t.Errorf("current %s #%d, want %s #%d", cur.Name, cur.Revision, tt.wantCurrent, tt.wantNumber)
			}
		})
	}
}

// TestHashCollision: a revision name taken by another template bumps collisionCount
// and fails the sync; the next sync uses the new name.
func TestHashCollision(t *testing.T) {
	ds := newDS("ds")
	taken := rev(t, newDS("ds", withImage("other")), 1)
	taken.Name = "ds-" + hashOf(ds)
	f := newFixture(t, ds, newNode("a"))
	if _, err := f.Client.AppsV1().ControllerRevisions("ns").Create(f.TestContext(), taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync("ns/ds"); err == nil {
		t.Fatal("sync succeeded on a hash collision")
	}
	st, ok := f.lastStatus()
	if !ok || !reflect.DeepEqual(st.CollisionCount, ptr.To[int32](1)) {
		t.Fatalf("collisionCount %v (%v), want 1", st.CollisionCount, ok)
	}
	bumped := ds.DeepCopy()
	bumped.Status.CollisionCount = ptr.To[int32](1)
	f.Cache(bumped)
	f.MustSync("ns/ds")
	if n := len(f.revisions()); n != 2 {
		t.Errorf("%d revisions, want 2", n)
	}
	if hashOf(bumped) == hashOf(ds) {
		t.Error("the collision count does not change the hash")
	}
}

// TestCleanupHistory: old revisions beyond the limit go, oldest first, but not one a pod
// still runs.
func TestCleanupHistory(t *testing.T) {
	var revs []*appsv1.ControllerRevision
	var dss []*appsv1.DaemonSet
	for i := range 5 {
		d := newDS("ds", withImage(fmt.Sprintf("img:%d", i)))
		dss = append(dss, d)
		revs = append(revs, rev(t, d, int64(i+1)))
	}
	cur := dss[4]
	cur.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	cur.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	// A pod still runs revision 1.
	os := []runtime.Object{cur, newNode("a"), newPodOf("p-a", cur, "a", hashOf(dss[0]))}
	for _, r := range revs {
		os = append(os, r)
	}
	f := newFixture(t, os...)
	f.MustSync("ns/ds")
	var deleted []string
	for _, a := range f.actions() {
		if len(a) > len("delete controllerrevisions ") && a[:len("delete controllerrevisions ")] == "delete controllerrevisions " {
			deleted = append(deleted, a[len("delete controllerrevisions "):])
		}
	}
	want := []string{revs[1].Name, revs[2].Name}
	if !reflect.DeepEqual(deleted, want) {
		t.Errorf("deleted %v, want %v (revision 1 is live, 4 and 5 are kept)", deleted, want)
	}
}

func rev(t *testing.T, ds *appsv1.DaemonSet, n int64) *appsv1.ControllerRevision {
	return currentRevision(t, ds, n)
}

func orphan(r *appsv1.ControllerRevision) *appsv1.ControllerRevision {
	r.OwnerReferences = nil
	return r
}

func unlabelled(r *appsv1.ControllerRevision) *appsv1.ControllerRevision {
	delete(r.Labels, hashLabel)
	return r
}

var _ = corev1.PodRunning
