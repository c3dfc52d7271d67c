package controllertest

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// requests makes one request of each kind on client.
func requests(t *testing.T, client *fake.Clientset) {
	t.Helper()
	ctx := context.Background()
	pods := client.CoreV1().Pods("ns")
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, "web-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != "uid-web-00001" {
		t.Errorf("generated UID %q, want uid-web-00001", p.UID)
	}
	if _, err := pods.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Patch(ctx, "web-00001", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "web-00001", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestActions(t *testing.T) {
	client := fake.NewClientset()
	GenerateNames(client, "pods")
	requests(t, client)
	for _, tc := range []struct {
		name   string
		format ActionFormat
		want   []string
	}{
		{name: "writes", format: Writes,
			want: []string{"create pods", "update pods/status", "patch pods web-00001", "delete pods web-00001"}},
		{name: "reads too", format: Reads,
			want: []string{"create pods", "get pods web-00001", "list pods", "update pods/status", "patch pods web-00001", "delete pods web-00001"}},
		// The fake clientset records a request as it was sent: the create's object has
		// only a generateName.
		{name: "object names", format: ObjectNames,
			want: []string{"create pods", "update pods/status web-00001", "patch pods web-00001", "delete pods web-00001"}},
		{name: "namespaced", format: Reads | ObjectNames | Namespaced,
			want: []string{"create pods", "get pods ns/web-00001", "list pods", "update pods/status ns/web-00001",
				"patch pods ns/web-00001", "delete pods ns/web-00001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Actions(client, tc.format); !slices.Equal(got, tc.want) {
				t.Errorf("Actions = %q, want %q", got, tc.want)
			}
		})
	}
	if n := Count(client, "update", "pods"); n != 0 {
		t.Errorf("Count of pod updates = %d, want 0 (the one update is of pods/status)", n)
	}
	if n := Count(client, "delete", "pods"); n != 1 {
		t.Errorf("Count of pod deletes = %d, want 1", n)
	}
	if created := Created[*corev1.Pod](client); len(created) != 1 || created[0].GenerateName != "web-" {
		t.Errorf("Created = %v, want the pod sent", created)
	}
	if st := StatusUpdates[*corev1.Pod](client); len(st) != 1 || st[0].Status.Phase != corev1.PodRunning {
		t.Errorf("StatusUpdates = %v, want the one update", st)
	}
	if got := StatusUpdates[*corev1.Node](client); len(got) != 0 {
		t.Errorf("StatusUpdates of nodes = %v, want none", got)
	}
}

func TestStoredAndGet(t *testing.T) {
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	client := fake.NewClientset(Objects(pod("ns", "b"), pod("ns", "a"), pod("other", "c"))...)
	var names []string
	for _, p := range Stored[*corev1.Pod](t, client, "ns") {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("Stored = %v, want [a b]", names)
	}
	if got := Get[*corev1.Pod](t, client, "other", "c"); got.Name != "c" {
		t.Errorf("Get = %v", got)
	}
	if len(client.Actions()) != 0 {
		t.Errorf("reading what is stored made requests: %v", client.Actions())
	}
}
