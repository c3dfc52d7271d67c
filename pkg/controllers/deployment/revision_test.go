package deployment

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

func TestSetNewReplicaSetAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		deployAnn   map[string]string
		rsAnn       map[string]string
		newRevision string
		exists      bool
		want        map[string]string
		wantChanged bool
	}{
		{name: "new ReplicaSet", deployAnn: map[string]string{"kubernetes.io/change-cause": "v2", corev1.LastAppliedConfigAnnotation: "{}", RevisionAnnotation: "1"},
			newRevision: "2",
			want: map[string]string{"kubernetes.io/change-cause": "v2", RevisionAnnotation: "2",
				DesiredReplicasAnnotation: "3", MaxReplicasAnnotation: "4"}, wantChanged: true},
		{name: "up to date", deployAnn: map[string]string{"a": "b"}, rsAnn: map[string]string{"a": "b", RevisionAnnotation: "2"},
			newRevision: "2", exists: true, want: map[string]string{"a": "b", RevisionAnnotation: "2"}},
		{name: "rolled back to: old revision into the history", rsAnn: map[string]string{RevisionAnnotation: "1"},
			newRevision: "3", exists: true, want: map[string]string{RevisionAnnotation: "3", RevisionHistoryAnnotation: "1"}, wantChanged: true},
		{name: "history appended", rsAnn: map[string]string{RevisionAnnotation: "3", RevisionHistoryAnnotation: "1"},
			newRevision: "5", exists: true, want: map[string]string{RevisionAnnotation: "5", RevisionHistoryAnnotation: "1,3"}, wantChanged: true},
		{name: "higher revision kept", rsAnn: map[string]string{RevisionAnnotation: "7"},
			newRevision: "5", exists: true, want: map[string]string{RevisionAnnotation: "7"}},
		{name: "unparsable revision left alone", deployAnn: map[string]string{"a": "b"}, rsAnn: map[string]string{RevisionAnnotation: "x"},
			newRevision: "5", exists: true, want: map[string]string{"a": "b", RevisionAnnotation: "x"}},
		{name: "rs-only annotations stay", deployAnn: map[string]string{"a": "new"}, rsAnn: map[string]string{"a": "old", "mine": "1", RevisionAnnotation: "2"},
			newRevision: "2", exists: true, want: map[string]string{"a": "new", "mine": "1", RevisionAnnotation: "2"}, wantChanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 3)
			d.Annotations = maps.Clone(tt.deployAnn)
			rs := newReplicaSet(d, "x", 3, 0, 1)
			rs.Annotations = maps.Clone(tt.rsAnn)
			log, _ := ktesting.NewTestContext(t)
			changed := setNewReplicaSetAnnotations(log, d, rs, tt.newRevision, tt.exists)
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if !maps.Equal(rs.Annotations, tt.want) {
				t.Errorf("annotations = %v, want %v", rs.Annotations, tt.want)
			}
		})
	}
}

func TestRevisionHistoryLimit(t *testing.T) {
	// 400 five-character entries with commas: 2399 characters, over the 2000 limit.
	var entries []string
	for i := range 400 {
		entries = append(entries, fmt.Sprintf("%05d", i))
	}
	tests := []struct {
		name      string
		history   string
		wantLen   int
		wantFirst string
		wantLast  string
	}{
		{name: "empty", history: "", wantLen: 5, wantFirst: "99999", wantLast: "99999"},
		{name: "oldest dropped to fit", history: strings.Join(entries[:333], ","), wantLen: 1997, wantFirst: "00001", wantLast: "99999"},
		{name: "already over: trimmed", history: strings.Join(entries, ","), wantLen: 1997, wantFirst: "00068", wantLast: "99999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := &appsv1.ReplicaSet{}
			rs.Annotations = map[string]string{}
			if tt.history != "" {
				rs.Annotations[RevisionHistoryAnnotation] = tt.history
			}
			log, _ := ktesting.NewTestContext(t)
			appendRevisionHistory(log, rs, "99999")
			got := rs.Annotations[RevisionHistoryAnnotation]
			parts := strings.Split(got, ",")
			if len(got) != tt.wantLen || parts[0] != tt.wantFirst || parts[len(parts)-1] != tt.wantLast {
				t.Errorf("history has %d characters, %s..%s; want %d, %s..%s", len(got), parts[0], parts[len(parts)-1], tt.wantLen, tt.wantFirst, tt.wantLast)
			}
		})
	}
}

func TestRevisions(t *testing.T) {
	d := newDeployment("d", 1)
	mk := func(revs ...string) []*appsv1.ReplicaSet {
		var out []*appsv1.ReplicaSet
		for i, r := range revs {
			rs := oldReplicaSet(d, fmt.Sprint(i), 0, time.Duration(i)*time.Minute, 0)
			if r == "" {
				delete(rs.Annotations, RevisionAnnotation)
			} else {
				rs.Annotations[RevisionAnnotation] = r
			}
			out = append(out, rs)
		}
		return out
	}
	tests := []struct {
		name          string
		rss           []*appsv1.ReplicaSet
		max, previous int64
	}{
		{name: "none"},
		{name: "one", rss: mk("4"), max: 4, previous: 0},
		{name: "several, unordered", rss: mk("2", "7", "5"), max: 7, previous: 5},
		{name: "unparsable and missing skipped", rss: mk("x", "3", "", "1"), max: 3, previous: 1},
		{name: "duplicates", rss: mk("3", "3"), max: 3, previous: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, _ := ktesting.NewTestContext(t)
			if got := maxRevision(log, tt.rss); got != tt.max {
				t.Errorf("maxRevision = %d, want %d", got, tt.max)
			}
			if got := previousRevision(log, tt.rss); got != tt.previous {
				t.Errorf("previousRevision = %d, want %d", got, tt.previous)
			}
		})
	}
}

// TestRolloutUndo is what `kubectl rollout undo` leaves for the controller: the
// Deployment's template is revision 1's again. The ReplicaSet of revision 1 becomes
// current, revision 3, with 1 in its history, and the Deployment's revision follows.
func TestRolloutUndo(t *testing.T) {
	d := synced(newDeployment("d", 2), "2")
	d.Annotations["kubernetes.io/change-cause"] = "undo"
	rev1 := newReplicaSet(d, "a", 0, time.Hour, 1)
	rev2 := oldReplicaSet(d, "b", 2, time.Minute, 2)
	f := newFixture(t, d, rev1, rev2)
	f.mustSync("d")
	got := f.replicaSet("d-a")
	if got.Annotations[RevisionAnnotation] != "3" || got.Annotations[RevisionHistoryAnnotation] != "1" {
		t.Errorf("rolled-back ReplicaSet: revision %q history %q, want 3 and 1",
			got.Annotations[RevisionAnnotation], got.Annotations[RevisionHistoryAnnotation])
	}
	if got.Annotations["kubernetes.io/change-cause"] != "undo" {
		t.Errorf("change-cause not copied: %v", got.Annotations)
	}
	// The first sync updated the ReplicaSet and stopped; the next one (with the cache
	// caught up) records the revision on the Deployment and scales.
	f.Cache(got)
	f.Cache(f.deployment("d"))
	f.mustSync("d")
	if rev := f.deployment("d").Annotations[RevisionAnnotation]; rev != "3" {
		t.Errorf("deployment revision = %q, want 3", rev)
	}
	if n := *f.replicaSet("d-a").Spec.Replicas; n != 1 {
		t.Errorf("rolled-back ReplicaSet scaled to %d, want 1 (maxSurge of 2 at 25%%)", n)
	}
}

func TestSetAnnotationsFromReplicaSet(t *testing.T) {
	d := newDeployment("d", 1)
	d.Annotations = map[string]string{"kubernetes.io/change-cause": "v3", "other": "x", RevisionAnnotation: "3",
		corev1.LastAppliedConfigAnnotation: "{...}"}
	rs := newReplicaSet(d, "a", 0, 0, 1)
	rs.Annotations = map[string]string{"kubernetes.io/change-cause": "v1", RevisionAnnotation: "1", DesiredReplicasAnnotation: "1"}
	setAnnotationsFromReplicaSet(d, rs)
	want := map[string]string{"kubernetes.io/change-cause": "v1", RevisionAnnotation: "3", corev1.LastAppliedConfigAnnotation: "{...}"}
	if !maps.Equal(d.Annotations, want) {
		t.Errorf("annotations = %v, want %v", d.Annotations, want)
	}
}
