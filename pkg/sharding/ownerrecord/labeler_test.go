package ownerrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

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

// TestLabelerSetBehindInformer: the informer lags the API server, so a namespace moved
// A → B → A whose informer copy still shows the first write (B) must still be written
// when it moves back to B: Set goes by the newest copy it knows, its own last write's.
func TestLabelerSetBehindInformer(t *testing.T) {
	pm := partition.Map{Count: 1}
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, namespaceMeta("ns", nil, nil))
	versionedPatches(t, client)
	// The informer's watch delivers only what the test sends it.
	w := watch.NewFakeWithChanSize(10, false)
	client.PrependWatchReactor("namespaces", func(clienttesting.Action) (bool, watch.Interface, error) { return true, w, nil })
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
	if _, err := l.Activate(1); err != nil {
		t.Fatal(err)
	}
	inInformer := func() string {
		o, _, _ := l.informer.GetStore().GetByKey("ns")
		return o.(metav1.Object).GetLabels()[DefaultOwnerLabel]
	}

	tests := []struct {
		name    string
		owner   string
		deliver bool // the informer sees the write
		want    int  // writes
	}{
		{name: "first owner, seen by the informer", owner: "shard-b", deliver: true, want: 1},
		{name: "moved back, not yet seen", owner: "shard-a", want: 1},
		{name: "moved again while the informer shows the first write", owner: "shard-b", want: 1},
		{name: "unchanged", owner: "shard-b", want: 0},
	}
	for _, tt := range tests {
		res, err := l.Set(ctx, map[partition.ID]string{0: tt.owner})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res.Writes != tt.want {
			t.Errorf("%s: Set wrote %d times, want %d (the informer shows owner %q)", tt.name, res.Writes, tt.want, inInformer())
		}
		if labels, _ := labelsOf(t, client, "ns"); labels[DefaultOwnerLabel] != tt.owner {
			t.Fatalf("%s: the API server's copy names %q, want %q", tt.name, labels[DefaultOwnerLabel], tt.owner)
		}
		if tt.deliver {
			o, err := client.Resource(namespacesGVR).Get(ctx, "ns", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w.Modify(o)
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return inInformer() == tt.owner, nil
			}); err != nil {
				t.Fatalf("%s: the informer never saw the write", tt.name)
			}
		}
	}
}

// versionedPatches makes client's namespace patches behave as the API server's: a patch
// whose metadata.resourceVersion is not the stored one fails with a Conflict, and each
// patch gives the namespace the next resourceVersion (the fake keeps whatever the patch
// says).
func versionedPatches(t *testing.T, client *metadatafake.FakeMetadataClient) {
	t.Helper()
	var rv uint64 = 1
	apply := clienttesting.ObjectReaction(client.Tracker())
	client.PrependReactor("patch", "namespaces", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pa := action.(clienttesting.PatchAction)
		var patch struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		cur, err := client.Tracker().Get(namespacesGVR, "", pa.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := cur.(metav1.Object).GetResourceVersion()
		if p := patch.Metadata.ResourceVersion; p != "" && p != stored {
			return true, nil, apierrors.NewConflict(namespacesGVR.GroupResource(), pa.GetName(),
				fmt.Errorf("resourceVersion %s, stored %s", p, stored))
		}
		_, obj, err := apply(action)
		if err != nil {
			return true, nil, err
		}
		rv++
		obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(rv, 10))
		return true, obj, client.Tracker().Update(namespacesGVR, obj, "")
	})
}
