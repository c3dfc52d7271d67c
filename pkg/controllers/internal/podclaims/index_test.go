package podclaims

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func pod(ns, name string, volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Volumes: volumes}}
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func ephemeralVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
}

func TestIndex(t *testing.T) {
	inf := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	if err := AddIndex(inf); err != nil {
		t.Fatal(err)
	}
	if err := AddIndex(inf); err != nil {
		t.Fatalf("a second AddIndex: %v", err)
	}
	for _, p := range []*corev1.Pod{
		pod("ns", "direct", claimVolume("data", "shared")),
		pod("ns", "web", ephemeralVolume("scratch"), claimVolume("data", "shared"),
			corev1.Volume{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}),
		pod("other", "direct", claimVolume("data", "shared")),
		pod("ns", "none"),
	} {
		if err := inf.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, namespace, claim string
		want                   []string
	}{
		{name: "a claim two pods name directly", namespace: "ns", claim: "shared", want: []string{"direct", "web"}},
		{name: "an ephemeral volume's claim, <pod>-<volume>", namespace: "ns", claim: "web-scratch", want: []string{"web"}},
		{name: "claims are per namespace", namespace: "other", claim: "shared", want: []string{"direct"}},
		{name: "a claim nobody names", namespace: "ns", claim: "web-empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := Pods(inf.GetIndexer(), tc.namespace, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pods {
				got = append(got, p.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("pods %v, want %v", got, tc.want)
			}
		})
	}
}
