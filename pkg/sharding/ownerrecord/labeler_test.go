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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
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
	client := fakeClient(t, objs...)
	return runLabeler(t, pm, client), client
}

// fakeClient returns a fake metadata client holding objs.
func fakeClient(t *testing.T, objs ...runtime.Object) *metadatafake.FakeMetadataClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return metadatafake.NewSimpleMetadataClient(scheme, objs...)
}

// runLabeler runs a Labeler over client (with opts, if given) until the test ends and
// waits for its informer.
func runLabeler(t *testing.T, pm partition.Map, client metadata.Interface, opts ...LabelerOptions) *Labeler {
	t.Helper()
	var o LabelerOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	l, err := NewLabeler(client, pm, PolicyParams{Namespace: "kshard", ServiceAccount: "kshard-shard"}, o)
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
	return l
}

func labelsOf(t *testing.T, client *metadatafake.FakeMetadataClient, name string) (map[string]string, map[string]string) {
	t.Helper()
	o, err := client.Resource(namespacesGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o.Labels, o.Annotations
}

// tenure is a Tenure the test sets.
type tenure struct{ valid atomic.Bool }

func (t *tenure) Valid() bool { return t.valid.Load() }

// certain is a tenure that stays valid.
var certain = func() *tenure { t := &tenure{}; t.valid.Store(true); return t }()

// TestLabelerActivate: a new leader takes over what the namespaces say, partitions whose
// namespaces disagree are unknown, and a namespace of a term above the leader's is
// reported, never refused: it outlived its record, or it is forged.
func TestLabelerActivate(t *testing.T) {
	pm := partition.Map{Count: 1}
	tests := []struct {
		name string
		objs []runtime.Object
		term uint32
		want Claimed
	}{
		{name: "empty cluster", term: 1, want: Claimed{Owners: map[partition.ID]string{}}},
		{name: "agreeing namespaces", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "1"}),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-a"}, nil),
		}, want: Claimed{Owners: map[partition.ID]string{0: "shard-a"}, HighestTerm: 1, HighestIn: "a"}},
		{name: "disagreeing namespaces", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, nil),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-b"}, nil),
		}, want: Claimed{Owners: map[partition.ID]string{}}},
		{name: "terms above the leader's", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "3"}),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "900"}),
			namespaceMeta("c", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "2"}),
		}, want: Claimed{Owners: map[partition.ID]string{0: "shard-a"}, HighestTerm: 900, HighestIn: "b", Above: 2}},
		{name: "forged terms are counted apart", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "4000000000"}),
			namespaceMeta("b", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "7"}),
			namespaceMeta("c", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "4294967295"}),
		}, want: Claimed{Owners: map[partition.ID]string{0: "shard-a"}, HighestTerm: 7, HighestIn: "b", Above: 1, Forged: 2, ForgedIn: "a"}},
		{name: "a term that is not a number", term: 2, objs: []runtime.Object{
			namespaceMeta("a", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "x9"}),
		}, want: Claimed{Owners: map[partition.ID]string{0: "shard-a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := startLabeler(t, pm, tt.objs...)
			got, err := l.Activate(tt.term, certain)
			if err != nil {
				t.Fatalf("Activate: %v", err)
			}
			if !maps.Equal(got.Owners, tt.want.Owners) || got.HighestTerm != tt.want.HighestTerm || got.HighestIn != tt.want.HighestIn ||
				got.Above != tt.want.Above || got.Forged != tt.want.Forged || got.ForgedIn != tt.want.ForgedIn {
				t.Fatalf("Activate = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLabelerWritesOverNewerTerms: a namespace whose record carries a term above the
// leader's (forged near 2³² before it led, or any term written while it leads) does not
// stop the leader: Set writes its owner and stamps the leader's term over it, and so does
// the background loop. On main this failed: Activate refused to lead, and Set failed the batch forever.
func TestLabelerWritesOverNewerTerms(t *testing.T) {
	pm := partition.Map{Count: 1}
	l, client := startLabeler(t, pm,
		namespaceMeta("forged", map[string]string{DefaultOwnerLabel: "shard-x"}, map[string]string{DefaultOwnerLabel + "-term": "4294967295"}),
		namespaceMeta("stale", nil, map[string]string{DefaultOwnerLabel + "-term": "5"}))
	if _, err := l.Activate(7, certain); err != nil {
		t.Fatal(err)
	}
	res, err := l.Set(context.Background(), map[partition.ID]string{0: "shard-a"})
	if err != nil {
		t.Fatalf("Set over namespaces of newer terms: %v", err)
	}
	if res.Writes != 2 {
		t.Errorf("Set wrote %d namespaces, want 2", res.Writes)
	}
	for _, n := range []string{"forged", "stale"} {
		labels, annotations := labelsOf(t, client, n)
		if labels[DefaultOwnerLabel] != "shard-a" || annotations[DefaultOwnerLabel+"-term"] != "7" {
			t.Errorf("%s: labels %v annotations %v, want owner shard-a at term 7", n, labels, annotations)
		}
	}
	// Tampered while leading, with a term that could have been led: while the tenure is
	// valid no other leader can have written it, and the loop puts the record back.
	patch := []byte(`{"metadata":{"labels":{"` + DefaultOwnerLabel + `":"shard-y"},"annotations":{"` + DefaultOwnerLabel + `-term":"5000"}}}`)
	if _, err := client.Resource(namespacesGVR).Patch(context.Background(), "forged", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		labels, annotations := labelsOf(t, client, "forged")
		return labels[DefaultOwnerLabel] == "shard-a" && annotations[DefaultOwnerLabel+"-term"] == "7", nil
	}); err != nil {
		labels, annotations := labelsOf(t, client, "forged")
		t.Fatalf("the loop did not write over a newer term: labels %v annotations %v", labels, annotations)
	}
}

// TestLabelerWritesOnlyWhileCertain: while the tenure is not valid (the Lease may have
// run out while the process was stopped) neither Set nor the loop writes, and Set says
// why; once it is valid again, Set writes.
func TestLabelerWritesOnlyWhileCertain(t *testing.T) {
	pm := partition.Map{Count: 1}
	l, client := startLabeler(t, pm, namespaceMeta("ns", nil, nil))
	var ten tenure
	if _, err := l.Activate(3, &ten); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Set(context.Background(), map[partition.ID]string{0: "shard-a"}); !errors.Is(err, ErrNotCertain) {
		t.Fatalf("Set without a valid tenure: %v, want ErrNotCertain", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			t.Fatalf("patched without a valid tenure: %v", a)
		}
	}
	ten.valid.Store(true)
	if _, err := l.Set(context.Background(), map[partition.ID]string{0: "shard-a"}); err != nil {
		t.Fatal(err)
	}
	if labels, _ := labelsOf(t, client, "ns"); labels[DefaultOwnerLabel] != "shard-a" {
		t.Fatalf("labels %v after the tenure came back, want owner shard-a", labels)
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
	if _, err := l.Activate(4, certain); err != nil {
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
			if _, err := l.Activate(1, certain); err != nil {
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

// laggingLabeler is a Labeler (partition map of one partition, active at term 1) whose
// informer sees only what the test delivers, over a fake whose patches behave as the API
// server's (versionedPatches).
type laggingLabeler struct {
	t      *testing.T
	l      *Labeler
	client *metadatafake.FakeMetadataClient
	w      *watch.FakeWatcher
}

func newLaggingLabeler(t *testing.T, objs ...runtime.Object) *laggingLabeler {
	t.Helper()
	client := fakeClient(t, objs...)
	versionedPatches(t, client)
	w := watch.NewFakeWithChanSize(10, false)
	client.PrependWatchReactor("namespaces", func(clienttesting.Action) (bool, watch.Interface, error) { return true, w, nil })
	l := runLabeler(t, partition.Map{Count: 1}, client)
	if _, err := l.Activate(1, certain); err != nil {
		t.Fatal(err)
	}
	return &laggingLabeler{t: t, l: l, client: client, w: w}
}

// set runs Set(partition 0 → owner) and checks how many namespaces it wrote and that the
// API server's copy of "ns" then names owner.
func (h *laggingLabeler) set(step, owner string, wantWrites int) {
	h.t.Helper()
	res, err := h.l.Set(context.Background(), map[partition.ID]string{0: owner})
	if err != nil {
		h.t.Fatalf("%s: %v", step, err)
	}
	if res.Writes != wantWrites {
		h.t.Errorf("%s: Set wrote %d times, want %d (the informer shows owner %q)", step, res.Writes, wantWrites, h.inInformer())
	}
	if labels, _ := labelsOf(h.t, h.client, "ns"); labels[DefaultOwnerLabel] != owner {
		h.t.Fatalf("%s: the API server's copy names %q, want %q", step, labels[DefaultOwnerLabel], owner)
	}
}

// inInformer returns the owner label of the informer's copy of "ns".
func (h *laggingLabeler) inInformer() string {
	o, ok, _ := h.l.informer.GetStore().GetByKey("ns")
	if !ok {
		return "(none)"
	}
	return o.(metav1.Object).GetLabels()[DefaultOwnerLabel]
}

// deliver sends the informer ev of the API server's current copy of "ns" (of gone when
// set) and waits until its store shows it.
func (h *laggingLabeler) deliver(ev watch.EventType, gone runtime.Object) {
	h.t.Helper()
	o := gone
	if o == nil {
		var err error
		if o, err = h.client.Resource(namespacesGVR).Get(context.Background(), "ns", metav1.GetOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
	h.w.Action(ev, o)
	want := o.(metav1.Object).GetResourceVersion()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c, ok, _ := h.l.informer.GetStore().GetByKey("ns")
		if ev == watch.Deleted {
			return !ok, nil
		}
		return ok && c.(metav1.Object).GetResourceVersion() == want, nil
	}); err != nil {
		h.t.Fatalf("the informer never saw the %s event", ev)
	}
}

// remembered returns how many namespaces the Labeler keeps its own last write of.
func (h *laggingLabeler) remembered() int {
	h.l.wroteMu.Lock()
	defer h.l.wroteMu.Unlock()
	return len(h.l.wrote)
}

// TestLabelerSetBehindInformer: the informer lags the API server, so a namespace moved
// A → B → A whose informer copy still shows the first write (B) must still be written
// when it moves back to B: Set goes by the newest copy it knows, its own last write's,
// and forgets it once the informer has caught up.
func TestLabelerSetBehindInformer(t *testing.T) {
	h := newLaggingLabeler(t, namespaceMeta("ns", nil, nil))
	h.set("first owner", "shard-b", 1)
	h.deliver(watch.Modified, nil)
	h.set("moved back, not yet seen by the informer", "shard-a", 1)
	h.set("moved again while the informer shows the first write", "shard-b", 1)
	h.set("unchanged", "shard-b", 0)
	h.deliver(watch.Modified, nil)
	if n := h.remembered(); n != 0 {
		t.Errorf("%d own writes kept after the informer caught up, want 0", n)
	}
}

// TestLabelerSetRecreatedNamespace: a namespace deleted and created again under the same
// name (a new UID) while the informer still shows the old one: Set writes the new one,
// goes by that write (not by the old object's label) while the informer lags, and the old
// object's deletion reaching the informer does not make it forget the new one's.
func TestLabelerSetRecreatedNamespace(t *testing.T) {
	old := namespaceMeta("ns", nil, nil)
	old.UID = "uid-1"
	h := newLaggingLabeler(t, old)
	h.set("first owner", "shard-b", 1)
	h.deliver(watch.Modified, nil)
	gone, err := h.client.Resource(namespacesGVR).Get(context.Background(), "ns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.client.Tracker().Delete(namespacesGVR, "", "ns"); err != nil {
		t.Fatal(err)
	}
	again := namespaceMeta("ns", nil, nil)
	again.UID, again.ResourceVersion = "uid-2", "10"
	if err := h.client.Tracker().Add(again); err != nil {
		t.Fatal(err)
	}
	h.set("moved while the informer shows the deleted object", "shard-a", 1)
	h.set("moved back while the informer shows the deleted object labelled so", "shard-b", 1)
	h.deliver(watch.Deleted, gone)
	if n := h.remembered(); n != 1 {
		t.Errorf("%d own writes kept after the old object's deletion, want the new object's", n)
	}
	// The informer has the namespace again once its add event comes; the loop labels it.
	h.deliver(watch.Added, nil)
	if n := h.remembered(); n != 0 {
		t.Errorf("%d own writes kept after the informer caught up, want 0", n)
	}
	h.set("moved once the informer has the new object", "shard-a", 1)
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
		if n, err := strconv.ParseUint(stored, 10, 64); err == nil {
			rv = max(rv, n)
		}
		rv++
		obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(rv, 10))
		return true, obj, client.Tracker().Update(namespacesGVR, obj, "")
	})
}

// TestLabelerStampTerm: a leader stamps its term on a namespace whose label it does not
// change, never lowering a higher term, and not while its tenure is invalid; a missing
// namespace is no error. A Labeler that found a plausible term above its own stays
// inactive and stamps nothing.
func TestLabelerStampTerm(t *testing.T) {
	pm := partition.Map{Count: 1}
	l, client := startLabeler(t, pm,
		namespaceMeta("kube-system", map[string]string{DefaultOwnerLabel: "shard-a"}, map[string]string{DefaultOwnerLabel + "-term": "4"}),
		namespaceMeta("ahead", nil, map[string]string{DefaultOwnerLabel + "-term": "9"}))
	if c, err := l.Activate(8, certain); err != nil || c.HighestTerm != 9 {
		t.Fatalf("Activate(8) = %+v, %v; want HighestTerm 9", c, err)
	}
	if err := l.StampTerm(context.Background(), "kube-system"); err == nil {
		t.Fatal("StampTerm succeeded on a Labeler that found a term above its own")
	}
	var ten tenure
	if _, err := l.Activate(10, &ten); err != nil {
		t.Fatal(err)
	}
	if err := l.StampTerm(context.Background(), "kube-system"); !errors.Is(err, ErrNotCertain) {
		t.Fatalf("StampTerm without a valid tenure: %v, want ErrNotCertain", err)
	}
	ten.valid.Store(true)
	for _, n := range []string{"kube-system", "missing"} {
		if err := l.StampTerm(context.Background(), n); err != nil {
			t.Fatalf("StampTerm(%s): %v", n, err)
		}
	}
	labels, annotations := labelsOf(t, client, "kube-system")
	if labels[DefaultOwnerLabel] != "shard-a" || annotations[DefaultOwnerLabel+"-term"] != "10" {
		t.Errorf("kube-system: labels %v annotations %v, want owner shard-a kept at term 10", labels, annotations)
	}
	if _, err := l.Activate(5, certain); err != nil {
		t.Fatal(err)
	}
	_ = l.StampTerm(context.Background(), "kube-system")
	if _, annotations := labelsOf(t, client, "kube-system"); annotations[DefaultOwnerLabel+"-term"] != "10" {
		t.Errorf("a stamp of term 5 lowered kube-system's term to %s", annotations[DefaultOwnerLabel+"-term"])
	}
}
