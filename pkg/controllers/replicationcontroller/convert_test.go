package replicationcontroller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestConversion(t *testing.T) {
	now := metav1.Now()
	full := newRC("web", 3, func(rc *corev1.ReplicationController) {
		rc.Spec.MinReadySeconds = 7
		rc.Labels = map[string]string{"team": "a"}
		rc.Status = corev1.ReplicationControllerStatus{Replicas: 2, FullyLabeledReplicas: 1, ReadyReplicas: 1,
			AvailableReplicas: 1, ObservedGeneration: 4, Conditions: []corev1.ReplicationControllerCondition{{
				Type: corev1.ReplicationControllerReplicaFailure, Status: corev1.ConditionTrue,
				LastTransitionTime: now, Reason: "FailedCreate", Message: "exceeded quota"}}}
	})
	tests := []struct {
		name     string
		rc       *corev1.ReplicationController
		wantView func(*testing.T, *appsv1.ReplicaSet)
	}{
		{name: "every field the controller uses", rc: full, wantView: func(t *testing.T, rs *appsv1.ReplicaSet) {
			if rs.Name != "web" || rs.UID != "uid-web" || rs.Labels["team"] != "a" {
				t.Errorf("metadata not carried over: %+v", rs.ObjectMeta)
			}
			if *rs.Spec.Replicas != 3 || rs.Spec.MinReadySeconds != 7 ||
				!apiequality.Semantic.DeepEqual(rs.Spec.Selector, &metav1.LabelSelector{MatchLabels: selector}) ||
				rs.Spec.Template.Labels["tier"] != "front" {
				t.Errorf("spec not carried over: %+v", rs.Spec)
			}
			want := appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
				ObservedGeneration: 4, Conditions: []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure,
					Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "FailedCreate", Message: "exceeded quota"}}}
			if !apiequality.Semantic.DeepEqual(rs.Status, want) {
				t.Errorf("status = %+v, want %+v", rs.Status, want)
			}
		}},
		{name: "no selector, no template", rc: &corev1.ReplicationController{
			ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns"}, Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To[int32](1)}},
			wantView: func(t *testing.T, rs *appsv1.ReplicaSet) {
				if rs.Spec.Selector != nil {
					t.Errorf("selector = %v, want nil", rs.Spec.Selector)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := toReplicaSet(tc.rc)
			tc.wantView(t, rs)
			back := toReplicationController(rs)
			want := tc.rc.DeepCopy()
			if want.Spec.Template == nil {
				want.Spec.Template = &corev1.PodTemplateSpec{}
			}
			if !apiequality.Semantic.DeepEqual(back, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v", back, want)
			}
		})
	}
}

// TestLister: which ReplicationControllers select a pod is decided by the map selector,
// and one without a selector selects nothing (client-go's GetPodControllers).
func TestLister(t *testing.T) {
	noSelector := newRC("none", 1, func(rc *corev1.ReplicationController) { rc.Spec.Selector = nil })
	other := newRC("other", 1, func(rc *corev1.ReplicationController) { rc.Spec.Selector = map[string]string{"app": "db"} })
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for _, rc := range []*corev1.ReplicationController{newRC("web", 0), noSelector, other} {
		if err := indexer.Add(rc); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{name: "matching labels", labels: map[string]string{"app": "web", "x": "y"}, want: []string{"web"}},
		{name: "other labels", labels: map[string]string{"app": "db"}, want: []string{"other"}},
		{name: "no labels", labels: nil, want: nil},
	}
	l := Kind().Lister(indexer)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rss, _ := l.GetPodReplicaSets(newPod("p", tc.labels, nil))
			var got []string
			for _, rs := range rss {
				got = append(got, rs.Name)
			}
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("selecting = %v, want %v", got, tc.want)
			}
		})
	}
	if rs, err := l.ReplicaSets("ns").Get("web"); err != nil || rs.Spec.Selector.MatchLabels["app"] != "web" {
		t.Errorf("Get(web) = %v, %v", rs, err)
	}
}
