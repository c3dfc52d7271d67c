package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func namespaceMeta(name string, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations, ResourceVersion: "1"},
	}
}

// startLabeler runs a Labeler over a fake metadata client holding objs.
func startLabeler(t *testing.T, pm partition.Map, objs ...runtime.Object) (*Labeler, *metadatafake.FakeMetadataClient) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	l, err := NewLabeler(client, pm, PolicyParams{Namespace: "kshard", ServiceAccount: "kshard-shard"}, LabelerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return l.HasSynced(), nil
	}); err != nil {
		t.Fatal(err)
	}
	return l, client
}

func labelsOf(t *testing.T, client *metadatafake.FakeMetadataClient, name string) (map[string]string, map[string]string) {
	t.Helper()
	o, err := client.Resource(namespacesGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o.Labels, o.Annotations
}

// TestLabelerActivate: a new leader takes over what the namespaces say, partitions whose
// namespaces disagree are unknown, and a namespace written by a newer term deposes it.
func TestLabelerActivate(t *testing.T) {
	pm := partition.Map{Count: 1}
	tests := []struct {
		name    string
		objs    []runtime.Object
		term    uint32
		want    map[partition.ID]string
		wantErr error
	}{
		{name: "empty cluster", term: 1, want: map[partition.ID]string{}},
		{name: "agreeing namespaces", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "1"}),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-a"}, nil),
		}, want: map[partition.ID]string{0: "shard-a"}},
		{name: "disagreeing namespaces", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, nil),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-b"}, nil),
		}, want: map[partition.ID]string{}},
		{name: "newer term", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "3"}),
		}, wantErr: ErrDeposed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := startLabeler(t, pm, tt.objs...)
			got, err := l.Activate(tt.term)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Activate: %v, want %v", err, tt.wantErr)
			}
			if err == nil && !maps.Equal(got, tt.want) {
				t.Fatalf("Activate = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLabelerSet: nothing is written before Activate; Set writes the owner label and the
// term of every namespace of the batch's partitions (and nothing else), names the newest
// write, removes the label for no owner, and the background loop labels a namespace
// created later from the table.
func TestLabelerSet(t *testing.T) {
	pm := partition.Map{Count: 64}
	// Two namespaces in one partition, one in another.
	same := []string{"ns-0"}
	var other string
	for i := 1; len(same) < 2 || other == ""; i++ {
		n := fmt.Sprintf("ns-%d", i)
		if pm.For(n) == pm.For(same[0]) && len(same) < 2 {
			same = append(same, n)
		} else if pm.For(n) != pm.For(same[0]) && other == "" {
			other = n
		}
	}
	p := pm.For(same[0])
	l, client := startLabeler(t, pm,
		namespaceMeta(same[0], map[string]string{"other": "kept"}, nil),
		namespaceMeta(same[1], map[string]string{DefaultOwnerLabel: "shard-a"}, nil),
		namespaceMeta(other, nil, nil))
	if _, err := l.Set(context.Background(), map[partition.ID]string{p: "shard-b"}); err == nil {
		t.Fatal("Set before Activate succeeded")
	}
	if _, err := l.Activate(4); err != nil {
		t.Fatal(err)
	}
	res, err := l.Set(context.Background(), map[partition.ID]string{p: "shard-b"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Writes != 2 || (res.Last != same[0] && res.Last != same[1]) {
		t.Fatalf("Set = %+v, want 2 writes, last one of %v", res, same)
	}
	for _, n := range same {
		labels, annotations := labelsOf(t, client, n)
		if labels[DefaultOwnerLabel] != "shard-b" || annotations[DefaultOwnerLabel+"-term"] != "4" {
			t.Errorf("%s: labels %v annotations %v, want owner shard-b at term 4", n, labels, annotations)
		}
	}
	if labels, _ := labelsOf(t, client, same[0]); labels["other"] != "kept" {
		t.Errorf("%s lost its other label: %v", same[0], labels)
	}
	if labels, _ := labelsOf(t, client, other); labels[DefaultOwnerLabel] != "" {
		t.Errorf("%s of another partition was written: %v", other, labels)
	}
	if _, err := l.Set(context.Background(), map[partition.ID]string{p: ""}); err != nil {
		t.Fatal(err)
	}
	if labels, _ := labelsOf(t, client, same[1]); labels[DefaultOwnerLabel] != "" {
		t.Errorf("%s still has an owner after it was removed: %v", same[1], labels)
	}

	// A namespace created later in a known partition is labelled by the loop.
	if _, err := l.Set(context.Background(), map[partition.ID]string{pm.For(other): "shard-c"}); err != nil {
		t.Fatal(err)
	}
	var later string
	for i := 0; later == ""; i++ {
		if n := fmt.Sprintf("later-%d", i); pm.For(n) == pm.For(other) {
			later = n
		}
	}
	if _, err := client.Resource(namespacesGVR).(metadatafake.MetadataClient).CreateFake(namespaceMeta(later, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		labels, _ := labelsOf(t, client, later)
		return labels[DefaultOwnerLabel] == "shard-c", nil
	}); err != nil {
		t.Fatalf("namespace created later not labelled: %v", err)
	}
}

// TestLabelerLabelsTerminatingNamespaces: a namespace being deleted is labelled with its
// owner too (by Set and by the loop), since its new owner's namespace controller must be
// let through to delete its content; it is never the namespace Set names for the probe,
// which NamespaceLifecycle would refuse there.
func TestLabelerLabelsTerminatingNamespaces(t *testing.T) {
	pm := partition.Map{Count: 1}
	terminating := func(name string) *metav1.PartialObjectMetadata {
		m := namespaceMeta(name, map[string]string{DefaultOwnerLabel: "shard-a"}, nil)
		m.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		m.Finalizers = []string{"kubernetes"}
		return m
	}
	tests := []struct {
		name     string
		objs     []runtime.Object
		wantLast string
	}{
		{name: "only a terminating namespace", objs: []runtime.Object{terminating("gone")}, wantLast: ""},
		{name: "beside an active one", objs: []runtime.Object{terminating("gone"), namespaceMeta("live", nil, nil)}, wantLast: "live"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, client := startLabeler(t, pm, tt.objs...)
			if _, err := l.Activate(1); err != nil {
				t.Fatal(err)
			}
			res, err := l.Set(context.Background(), map[partition.ID]string{0: "shard-b"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Last != tt.wantLast {
				t.Errorf("Set named %q for the probe, want %q", res.Last, tt.wantLast)
			}
			if labels, _ := labelsOf(t, client, "gone"); labels[DefaultOwnerLabel] != "shard-b" {
				t.Errorf("terminating namespace labelled %v, want owner shard-b", labels)
			}
		})
	}
}
