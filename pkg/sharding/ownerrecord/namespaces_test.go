package ownerrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// partitionLabel is the label namespace name must carry with pm.
func partitionLabel(pm partition.Map, name string) string {
	return strconv.FormatUint(uint64(pm.For(name)), 10)
}

// patchBody is what a partition label patch says.
type patchBody struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec   any `json:"spec"`
	Status any `json:"status"`
}

func decodePatch(t *testing.T, pa clienttesting.PatchAction) patchBody {
	t.Helper()
	var b patchBody
	if err := json.Unmarshal(pa.GetPatch(), &b); err != nil {
		t.Fatalf("patch %s: %v", pa.GetPatch(), err)
	}
	return b
}

// TestLabelerWriteLabel: a namespace gets the partition its name hashes to in its
// partition label, by a merge patch of that label alone with the namespace's
// resourceVersion as precondition; not while the Labeler is inactive (no error: Activate
// queues every namespace again), not while its tenure is not valid (ErrNotCertain), and
// not when the label is already right. A conflict is re-read and retried.
func TestLabelerWriteLabel(t *testing.T) {
	pm := partition.Map{Count: 8}
	right := partitionLabel(pm, "team-a")
	wrong := strconv.Itoa(int(pm.For("team-a")+1) % 8)
	tests := []struct {
		name     string
		ns       *metav1.PartialObjectMetadata
		inactive bool
		invalid  bool
		// concurrent changes the namespace (a write by someone else) when the first patch
		// arrives, so that its precondition fails.
		concurrent bool
		wantErr    error
		wantRVs    []string // the resourceVersion of each patch sent
		wantLabel  string
	}{
		{name: "no label", ns: namespaceMeta("team-a", map[string]string{"other": "kept"}), wantRVs: []string{"1"}, wantLabel: right},
		{name: "a wrong label", ns: namespaceMeta("team-a", map[string]string{DefaultPartitionLabel: wrong, "other": "kept"}),
			wantRVs: []string{"1"}, wantLabel: right},
		{name: "an empty label", ns: namespaceMeta("team-a", map[string]string{DefaultPartitionLabel: "", "other": "kept"}),
			wantRVs: []string{"1"}, wantLabel: right},
		{name: "already labelled right", ns: namespaceMeta("team-a", map[string]string{DefaultPartitionLabel: right, "other": "kept"}),
			wantLabel: right},
		{name: "inactive", ns: namespaceMeta("team-a", map[string]string{"other": "kept"}), inactive: true},
		{name: "tenure not valid", ns: namespaceMeta("team-a", map[string]string{"other": "kept"}), invalid: true, wantErr: ErrNotCertain},
		{name: "a conflict is re-read and retried", ns: namespaceMeta("team-a", map[string]string{"other": "kept"}), concurrent: true,
			wantRVs: []string{"1", "5"}, wantLabel: right},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{count: pm.Count, namespaces: []runtime.Object{tt.ns}})
			if !tt.inactive {
				ten := validTenure()
				ten.valid.Store(!tt.invalid)
				f.activate(7, ten)
			}
			if tt.concurrent {
				var once atomic.Bool
				f.meta.PrependReactor("patch", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
					if once.CompareAndSwap(false, true) {
						ns := namespaceMeta("team-a", map[string]string{"other": "kept", "added": "meanwhile"})
						ns.ResourceVersion = "5"
						if err := f.meta.Tracker().Update(namespacesGVR, ns, ""); err != nil {
							return true, nil, err
						}
					}
					return false, nil, nil
				})
			}
			f.resetActions()
			err := f.l.writeLabel(f.ctx, "team-a")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("writeLabel = %v, want %v", err, tt.wantErr)
			}
			patches := f.namespacePatches("team-a")
			var rvs []string
			for _, pa := range patches {
				b := decodePatch(t, pa)
				rvs = append(rvs, b.Metadata.ResourceVersion)
				if want := map[string]string{DefaultPartitionLabel: right}; !maps.Equal(b.Metadata.Labels, want) ||
					b.Metadata.Annotations != nil || b.Spec != nil || b.Status != nil {
					t.Errorf("patch %s: want the partition label %s=%s alone", pa.GetPatch(), DefaultPartitionLabel, right)
				}
			}
			if fmt.Sprint(rvs) != fmt.Sprint(tt.wantRVs) {
				t.Errorf("patches with resourceVersions %v, want %v", rvs, tt.wantRVs)
			}
			labels := f.labelsOf("team-a")
			if got := labels[DefaultPartitionLabel]; got != tt.wantLabel && tt.wantLabel != "" {
				t.Errorf("partition label %q, want %q", got, tt.wantLabel)
			}
			if labels["other"] != "kept" {
				t.Errorf("labels %v: another label was lost", labels)
			}
			if tt.concurrent && labels["added"] != "meanwhile" {
				t.Errorf("labels %v: the concurrent write was undone", labels)
			}
		})
	}
}

// TestLabelerWriteLabelGone: a namespace deleted (not in the informer, or gone when the
// patch arrives) is no error and not written.
func TestLabelerWriteLabelGone(t *testing.T) {
	f := newFixture(t, setup{namespaces: []runtime.Object{namespaceMeta("going", nil)}})
	f.activate(7, certain)
	if err := f.l.writeLabel(f.ctx, "never-seen"); err != nil {
		t.Errorf("writeLabel of an unknown namespace: %v", err)
	}
	if err := f.meta.Tracker().Delete(namespacesGVR, "", "going"); err != nil {
		t.Fatal(err)
	}
	// The informer may still hold it: the patch then finds it gone.
	if err := f.l.writeLabel(f.ctx, "going"); err != nil {
		t.Errorf("writeLabel of a deleted namespace: %v", err)
	}
}

// TestLabelerNamespaceLoop: the running Labeler labels every namespace with its
// partition once active, and a namespace created later, and writes nothing before
// Activate or while its tenure is not valid.
func TestLabelerNamespaceLoop(t *testing.T) {
	pm := partition.Map{Count: 8}
	var objs []runtime.Object
	names := []string{"kube-system", "default", "team-a", "team-b", "team-c"}
	for _, n := range names {
		objs = append(objs, namespaceMeta(n, map[string]string{"other": "kept"}))
	}
	right := namespaceMeta("labelled", map[string]string{DefaultPartitionLabel: partitionLabel(pm, "labelled")})
	objs = append(objs, right)
	f := newFixture(t, setup{count: pm.Count, namespaces: objs, run: true})

	// Inactive: the workers take every namespace off the queue and write nothing.
	waitQueueEmpty(t, f)
	time.Sleep(50 * time.Millisecond)
	if p := f.namespacePatches(""); len(p) > 0 {
		t.Fatalf("an inactive Labeler patched %d namespaces", len(p))
	}

	// Active without a valid tenure: nothing either.
	ten := &tenure{}
	f.activate(7, ten)
	time.Sleep(100 * time.Millisecond)
	if p := f.namespacePatches(""); len(p) > 0 {
		t.Fatalf("the Labeler patched %d namespaces without a valid tenure", len(p))
	}

	ten.valid.Store(true)
	waitLabelled(t, f, names...)
	for _, n := range names {
		if f.labelsOf(n)["other"] != "kept" {
			t.Errorf("%s lost another label: %v", n, f.labelsOf(n))
		}
	}
	if p := f.namespacePatches("labelled"); len(p) > 0 {
		t.Errorf("a namespace labelled right was patched: %s", p[0].GetPatch())
	}

	// A namespace created later, and a label removed by hand.
	if _, err := f.meta.Resource(namespacesGVR).(metadatafake.MetadataClient).CreateFake(namespaceMeta("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := namespaceMeta("team-a", map[string]string{"other": "kept"})
	removed.ResourceVersion = "1000"
	if err := f.meta.Tracker().Update(namespacesGVR, removed, ""); err != nil {
		t.Fatal(err)
	}
	waitLabelled(t, f, "later", "team-a")
}

func waitQueueEmpty(t *testing.T, f *fixture) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.l.queue.Len() == 0, nil
	}); err != nil {
		t.Fatalf("the namespace queue never emptied: %d left", f.l.queue.Len())
	}
}

// waitLabelled waits until every namespace of names carries its partition label.
func waitLabelled(t *testing.T, f *fixture, names ...string) {
	t.Helper()
	for _, n := range names {
		want := partitionLabel(f.pm, n)
		if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return f.labelsOf(n)[DefaultPartitionLabel] == want, nil
		}); err != nil {
			t.Fatalf("namespace %s not labelled %s=%s: labels %v", n, DefaultPartitionLabel, want, f.labelsOf(n))
		}
	}
}

// TestLabelerProbeable: Probeable names a namespace of the partition whose label is in
// place and that is not terminating, and NamespacesOf every namespace of the partition.
func TestLabelerProbeable(t *testing.T) {
	pm := partition.Map{Count: 4}
	ns := namespacesOf(pm, 1, 3)
	terminating := namespaceMeta(ns[0], map[string]string{DefaultPartitionLabel: "1"})
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	tests := []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{name: "no namespace"},
		{name: "not labelled yet", objs: []runtime.Object{namespaceMeta(ns[0], nil), namespaceMeta(ns[1], map[string]string{DefaultPartitionLabel: "2"})}},
		{name: "labelled", objs: []runtime.Object{namespaceMeta(ns[0], nil), namespaceMeta(ns[1], map[string]string{DefaultPartitionLabel: "1"})}, want: ns[1]},
		{name: "terminating", objs: []runtime.Object{terminating}},
		{name: "terminating beside a labelled one", objs: []runtime.Object{terminating, namespaceMeta(ns[2], map[string]string{DefaultPartitionLabel: "1"})}, want: ns[2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{count: pm.Count, namespaces: tt.objs})
			if got := f.l.Probeable(1); got != tt.want {
				t.Errorf("Probeable(1) = %q, want %q", got, tt.want)
			}
			if got := f.l.NamespacesOf(1); len(got) != len(tt.objs) {
				t.Errorf("NamespacesOf(1) = %v, want the %d namespaces", got, len(tt.objs))
			}
		})
	}
}
