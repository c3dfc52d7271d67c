package ownerrecord

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func namespaceMeta(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}
}

func TestLabeler(t *testing.T) {
	pm := partition.Map{Count: 64}
	right := Key(pm.For("right"))
	tests := []struct {
		name        string
		labels      map[string]string
		wantPatched bool
	}{
		{name: "missing", labels: nil, wantPatched: true},
		{name: "wrong", labels: map[string]string{PartitionLabel: "not-a-partition"}, wantPatched: true},
		{name: "right", labels: map[string]string{PartitionLabel: right, "other": "kept"}},
	}
	var objs []runtime.Object
	for _, tt := range tests {
		objs = append(objs, namespaceMeta(tt.name, tt.labels))
	}
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	l, err := NewLabeler(client, pm, LabelerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	nsGVR := corev1.SchemeGroupVersion.WithResource("namespaces")
	get := func(name string) *metav1.PartialObjectMetadata {
		o, err := client.Resource(nsGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, tt := range tests {
			if get(tt.name).Labels[PartitionLabel] != Key(pm.For(tt.name)) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("namespaces not labelled: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := get(tt.name).Labels; tt.name == "right" && got["other"] != "kept" {
				t.Errorf("labels %v lost the other label", got)
			}
		})
	}
	if got := l.Patches(); got != 2 {
		t.Errorf("patches = %d, want 2 (only the missing and the wrong label)", got)
	}
	var patches int
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 2 {
		t.Errorf("patch requests = %d, want 2", patches)
	}

	// A namespace created later is labelled too, and NamespacesOf finds it.
	if _, err := client.Resource(nsGVR).(metadatafake.MetadataClient).CreateFake(namespaceMeta("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return l.Labeled("later"), nil
	}); err != nil {
		t.Fatalf("namespace created later not labelled: %v", err)
	}
	if got := l.NamespacesOf(pm.For("later")); !slices.Contains(got, "later") {
		t.Errorf("NamespacesOf(%d) = %v, want it to contain later", pm.For("later"), got)
	}
}
