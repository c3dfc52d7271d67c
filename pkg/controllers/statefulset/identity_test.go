package statefulset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParentAndOrdinal(t *testing.T) {
	tests := []struct {
		name, pod, wantParent string
		wantOrdinal           int
	}{
		{name: "simple", pod: "web-0", wantParent: "web", wantOrdinal: 0},
		{name: "dashed set name", pod: "my-web-12", wantParent: "my-web", wantOrdinal: 12},
		{name: "no ordinal", pod: "web", wantOrdinal: -1},
		{name: "beyond int32", pod: "web-99999999999", wantParent: "web", wantOrdinal: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, o := parentAndOrdinal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tt.pod}})
			if p != tt.wantParent || o != tt.wantOrdinal {
				t.Errorf("got %q %d, want %q %d", p, o, tt.wantParent, tt.wantOrdinal)
			}
		})
	}
}

func TestNewVersionedPod(t *testing.T) {
	cur := newSet("web", 4, partitioned(2), withClaims("data"))
	upd := newSet("web", 4, partitioned(2), withClaims("data"), image("img:2"))
	tests := []struct {
		name      string
		ordinal   int
		wantRev   string
		wantImage string
	}{
		{name: "below the partition: current", ordinal: 1, wantRev: "cur", wantImage: "img:1"},
		{name: "at the partition: update", ordinal: 2, wantRev: "upd", wantImage: "img:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newVersionedPod(cur, upd, "cur", "upd", tt.ordinal)
			if podRevision(p) != tt.wantRev || p.Spec.Containers[0].Image != tt.wantImage {
				t.Errorf("revision %s image %s", podRevision(p), p.Spec.Containers[0].Image)
			}
			if !identityMatches(cur, p) || !storageMatches(cur, p) {
				t.Errorf("identity %v storage %v: %+v", identityMatches(cur, p), storageMatches(cur, p), p.ObjectMeta)
			}
		})
	}
	// Without a rollingUpdate block, status.currentReplicas takes the partition's place.
	noRU := newSet("web", 4)
	noRU.Spec.UpdateStrategy.RollingUpdate = nil
	noRU.Status.CurrentReplicas = 1
	if p := newVersionedPod(noRU, noRU, "cur", "upd", 0); podRevision(p) != "cur" {
		t.Errorf("ordinal 0 at %s, want cur", podRevision(p))
	}
	if p := newVersionedPod(noRU, noRU, "cur", "upd", 1); podRevision(p) != "upd" {
		t.Errorf("ordinal 1 at %s, want upd", podRevision(p))
	}
}

func TestUpdateIdentityAndStorage(t *testing.T) {
	set := newSet("web", 2, withClaims("data"))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data"}, {Name: "scratch"}}}}
	if identityMatches(set, pod) || storageMatches(set, pod) {
		t.Fatal("a bare pod matches")
	}
	updateIdentity(set, pod)
	updateStorage(set, pod)
	if !identityMatches(set, pod) || !storageMatches(set, pod) {
		t.Fatalf("after the updates: %+v", pod)
	}
	if pod.Labels[appsv1.PodIndexLabel] != "1" || len(pod.Spec.Volumes) != 2 || pod.Spec.Volumes[1].Name != "scratch" {
		t.Errorf("labels %v volumes %v", pod.Labels, pod.Spec.Volumes)
	}
	claims := claimsFor(set, pod)
	if c := claims["data"]; c.Name != "data-web-1" || c.Namespace != "ns" || c.Labels["app"] != "web" {
		t.Errorf("claim %+v", c.ObjectMeta)
	}
	if set.Spec.VolumeClaimTemplates[0].Labels != nil {
		t.Error("the template was modified")
	}
}
