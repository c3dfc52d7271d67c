package served

import (
	"errors"
	"reflect"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
)

// mutableDiscovery answers with whatever the test set last.
type mutableDiscovery struct {
	fakeDiscovery
}

func (m *mutableDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return m.lists, m.err
}

// fakeInformers records what the loop asks of the cache.
type fakeInformers struct {
	created, removed []schema.GroupVersionResource
	fail             map[schema.GroupVersionResource]error
}

func (f *fakeInformers) Informer(r Resource) (toolscache.SharedIndexInformer, error) {
	if err := f.fail[r.GroupVersionResource]; err != nil {
		delete(f.fail, r.GroupVersionResource)
		return nil, err
	}
	f.created = append(f.created, r.GroupVersionResource)
	return toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, nil), nil
}

func (f *fakeInformers) Remove(r Resource) error {
	f.removed = append(f.removed, r.GroupVersionResource)
	return nil
}

// heard records a consumer's notifications as "added pods" / "removed widgets".
type heard []string

func (e *heard) Added(r Resource, inf toolscache.SharedIndexInformer) {
	if inf == nil {
		*e = append(*e, "added "+r.Resource+" without an informer")
		return
	}
	*e = append(*e, "added "+r.Resource)
}
func (e *heard) Removed(r Resource) { *e = append(*e, "removed "+r.Resource) }

func TestLoop(t *testing.T) {
	withWidgets := cluster()[:2]
	podsOnly := cluster()[:1]
	gc, quota := &heard{}, &heard{}
	d := &mutableDiscovery{}
	inf := &fakeInformers{fail: map[schema.GroupVersionResource]error{nodes: errors.New("forbidden")}}
	loop, err := NewLoop(d, inf, logr.Discard(),
		&Consumer{Name: "garbagecollector", Spec: gcSpec, Subscriber: gc},
		&Consumer{Name: "resourcequota", Spec: quotaSpec, Subscriber: quota})
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	loop.OnDiscoveryFailure(func() { failures++ })
	rounds := []struct {
		name                 string
		lists                []*metav1.APIResourceList
		err                  error
		wantErr              bool
		wantFailure          bool
		wantGC, wantQuota    []string
		wantCreated, wantRem []schema.GroupVersionResource
	}{
		{name: "first round: informers shared, one that fails left for the next round", lists: withWidgets, wantErr: true,
			wantGC: []string{"added pods", "added widgets"}, wantQuota: []string{"added events", "added pods", "added widgets"},
			wantCreated: []schema.GroupVersionResource{pods, widgets, events}},
		{name: "the failed informer is had now", lists: withWidgets,
			wantGC: []string{"added nodes"}, wantCreated: []schema.GroupVersionResource{nodes}},
		{name: "the CRD's group fails discovery: its resource is kept", lists: podsOnly,
			err:         &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{widgets.GroupVersion(): errors.New("503")}},
			wantFailure: true},
		{name: "discovery down: nothing changes", err: errors.New("connection refused"), wantErr: true, wantFailure: true},
		{name: "discovery answers nothing: nothing changes", wantErr: true, wantFailure: true},
		{name: "the CRD is deleted: both told, its informer removed once neither wants it", lists: podsOnly,
			wantGC: []string{"removed widgets"}, wantQuota: []string{"removed widgets"},
			wantRem: []schema.GroupVersionResource{widgets}},
	}
	for _, r := range rounds {
		*gc, *quota = nil, nil
		inf.created, inf.removed = nil, nil
		d.lists, d.err = r.lists, r.err
		failures = 0
		if err := loop.Sync(); (err != nil) != r.wantErr {
			t.Fatalf("%s: Sync() = %v, want error %v", r.name, err, r.wantErr)
		}
		if (failures == 1) != r.wantFailure || failures > 1 {
			t.Errorf("%s: %d discovery failures counted, want failure %v", r.name, failures, r.wantFailure)
		}
		if !reflect.DeepEqual([]string(*gc), r.wantGC) {
			t.Errorf("%s: garbage collector heard %v, want %v", r.name, *gc, r.wantGC)
		}
		if !reflect.DeepEqual([]string(*quota), r.wantQuota) {
			t.Errorf("%s: quota heard %v, want %v", r.name, *quota, r.wantQuota)
		}
		if !reflect.DeepEqual(inf.created, r.wantCreated) {
			t.Errorf("%s: informers asked for %v, want %v", r.name, inf.created, r.wantCreated)
		}
		if !reflect.DeepEqual(inf.removed, r.wantRem) {
			t.Errorf("%s: informers removed %v, want %v", r.name, inf.removed, r.wantRem)
		}
	}
}
