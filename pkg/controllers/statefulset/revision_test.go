package statefulset

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/history"
)

// upstreamSet is the StatefulSet whose revision upstream's code named (below).
func upstreamSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web", Annotations: map[string]string{"a": "b"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "db"}, Annotations: map[string]string{"x": "y"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "img:1", Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}},
						Resources:              corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
						TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}},
					RestartPolicy: "Always", TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: "ClusterFirst",
					SecurityContext: &corev1.PodSecurityContext{}, SchedulerName: "default-scheduler",
				},
			},
		},
	}
}

// TestRevisionMatchesUpstream: the revision of upstreamSet as k8s.io/kubernetes v1.37.1
// records it (its getPatch with the apps/v1 codec and history.NewControllerRevision, run
// in a throwaway program of the tools module): the same bytes, so the same names.
func TestRevisionMatchesUpstream(t *testing.T) {
	const wantRaw = `{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"x":"y"},"labels":{"app":"web","tier":"db"}},"spec":{"containers":[{"image":"img:1","imagePullPolicy":"IfNotPresent","name":"c","ports":[{"containerPort":80,"protocol":"TCP"}],"resources":{"requests":{"cpu":"100m","memory":"1Gi"}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}}}`
	tests := []struct {
		name      string
		collision int32
		want      string
	}{
		{name: "collision count 0", collision: 0, want: "web-7d4d7cc7b4"},
		{name: "collision count 1", collision: 1, want: "web-7d4d7cc7b5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := upstreamSet()
			rev, err := newRevision(set, 1, ptr.To(tt.collision))
			if err != nil {
				t.Fatal(err)
			}
			if string(rev.Data.Raw) != wantRaw {
				t.Errorf("raw\n%s\nupstream's\n%s", rev.Data.Raw, wantRaw)
			}
			if rev.Name != tt.want || rev.Labels[history.HashLabel] != strings.TrimPrefix(tt.want, "web-") {
				t.Errorf("name %q labels %v, upstream's %q", rev.Name, rev.Labels, tt.want)
			}
			if rev.Labels["tier"] != "db" || rev.Annotations["a"] != "b" || rev.Revision != 1 || !metav1.IsControlledBy(rev, set) {
				t.Errorf("revision %+v", rev.ObjectMeta)
			}
			// Informers may decode protobuf instead of JSON; quantities must encode alike.
			pb, err := set.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var fromPB appsv1.StatefulSet
			if err := fromPB.Unmarshal(pb); err != nil {
				t.Fatal(err)
			}
			if again, _ := newRevision(&fromPB, 1, ptr.To(tt.collision)); again.Name != tt.want {
				t.Errorf("after a protobuf round trip: %q", again.Name)
			}
		})
	}
}

func TestApplyRevision(t *testing.T) {
	old := upstreamSet()
	rev, err := newRevision(old, 1, ptr.To[int32](0))
	if err != nil {
		t.Fatal(err)
	}
	cur := upstreamSet()
	cur.Spec.Replicas = ptr.To[int32](7)
	cur.Spec.Template.Spec.Containers[0].Image = "img:2"
	cur.Spec.Template.Labels["extra"] = "1"
	got, err := applyRevision(cur, rev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Template.Spec.Containers[0].Image != "img:1" || got.Spec.Template.Labels["extra"] != "" || *got.Spec.Replicas != 7 {
		t.Errorf("applied: image %s labels %v replicas %d", got.Spec.Template.Spec.Containers[0].Image, got.Spec.Template.Labels, *got.Spec.Replicas)
	}
	if cur.Spec.Template.Spec.Containers[0].Image != "img:2" {
		t.Error("the set was modified")
	}
}

// TestLatestRevisionMatches: a revision recorded by an older kube-controller-manager
// (with "creationTimestamp":null in the template's metadata) still matches the unchanged
// template, so no rollout starts; a changed template does not.
func TestLatestRevisionMatches(t *testing.T) {
	set := upstreamSet()
	proposed, err := newRevision(set, 2, ptr.To[int32](0))
	if err != nil {
		t.Fatal(err)
	}
	legacy := proposed.DeepCopy()
	legacy.Data = runtime.RawExtension{Raw: []byte(strings.Replace(string(proposed.Data.Raw),
		`"metadata":{`, `"metadata":{"creationTimestamp":null,`, 1))}
	changed := upstreamSet()
	changed.Spec.Template.Spec.Containers[0].Image = "img:2"
	other, _ := newRevision(changed, 1, ptr.To[int32](0))
	tests := []struct {
		name   string
		latest *appsv1.ControllerRevision
		want   bool
	}{
		{name: "older encoding of the same template", latest: legacy, want: true},
		{name: "another template", latest: other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if history.Equal(proposed, tt.latest) {
				t.Fatal("the revisions are byte-equal; the test needs them to differ")
			}
			if got := latestRevisionMatches(set, proposed, tt.latest); got != tt.want {
				t.Errorf("latestRevisionMatches = %v, want %v", got, tt.want)
			}
		})
	}
}
