package shardauth

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// shardPod is a shard pod of the shards' namespace with the given UID and group label
// ("" for none).
func shardPod(name, uid, group string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: map[string]string{"app.kubernetes.io/component": "shard"}}}
	if group != "" {
		p.Labels[GroupLabel] = group
	}
	return p
}

// podAPI is a fake API server's pods, counting the GETs; err fails them.
type podAPI struct {
	mu   sync.Mutex
	gets int
	err  error
}

func newPodAPI(pods ...runtime.Object) (*podAPI, *fake.Clientset) {
	a := &podAPI{}
	cs := fake.NewClientset(pods...)
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.gets++
		if a.err != nil {
			return true, nil, a.err
		}
		return false, nil, nil // the tracker answers
	})
	return a, cs
}

func (a *podAPI) getCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gets
}

func TestPodGroupsVerifyGroup(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, shardID, errors.New("RBAC: no get on pods"))
	tests := []struct {
		name       string
		pod        *corev1.Pod // in the API server; nil: none
		apiErr     error
		id         Identity
		claimed    string
		wantReason string // "" accepted
		wantCode   codes.Code
	}{
		{name: "the pod's group", pod: shardPod(shardID, shardUID, "hot"), id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot"},
		{name: "the default group, pod without the label", pod: shardPod(shardID, shardUID, ""), id: Identity{Shard: shardID, PodUID: shardUID}},
		{name: "a group the pod is not in (forged)", pod: shardPod(shardID, shardUID, ""), id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot",
			wantReason: ReasonGroupMismatch, wantCode: codes.PermissionDenied},
		{name: "another group than the pod's", pod: shardPod(shardID, shardUID, "cold"), id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot",
			wantReason: ReasonGroupMismatch, wantCode: codes.PermissionDenied},
		{name: "the default group, pod in a group", pod: shardPod(shardID, shardUID, "hot"), id: Identity{Shard: shardID, PodUID: shardUID},
			wantReason: ReasonGroupMismatch, wantCode: codes.PermissionDenied},
		{name: "a pod of that name with another UID", pod: shardPod(shardID, "other-uid", "hot"), id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot",
			wantReason: ReasonPodUIDMismatch, wantCode: codes.PermissionDenied},
		{name: "no pod of that name", id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot",
			wantReason: ReasonPodUIDMismatch, wantCode: codes.PermissionDenied},
		{name: "a token without pod UID", pod: shardPod(shardID, shardUID, "hot"), id: Identity{Shard: shardID}, claimed: "hot",
			wantReason: ReasonPodUIDMismatch, wantCode: codes.PermissionDenied},
		{name: "the pod cannot be read", pod: shardPod(shardID, shardUID, "hot"), apiErr: forbidden, id: Identity{Shard: shardID, PodUID: shardUID}, claimed: "hot",
			wantReason: ReasonPodLookupFailed, wantCode: codes.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			api, cs := newPodAPI(objs...)
			api.err = tc.apiErr
			g, err := NewPodGroups(PodGroupsOptions{Client: cs.CoreV1(), Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			err = g.VerifyGroup(context.Background(), tc.id, tc.claimed)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != tc.wantReason || ae.Code != tc.wantCode {
				t.Fatalf("err = %#v, want reason %s, code %v", err, tc.wantReason, tc.wantCode)
			}
		})
	}
}

// TestPodGroupsCache: a pod's group is read once per UID for CacheTTL, a forged claim is
// refused from the cache too, a failed read is not cached, and a new pod of the same
// name (another UID) is read again.
func TestPodGroupsCache(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	api, cs := newPodAPI(shardPod(shardID, shardUID, "hot"))
	g, err := NewPodGroups(PodGroupsOptions{Client: cs.CoreV1(), Namespace: ns, CacheTTL: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := Identity{Shard: shardID, PodUID: shardUID}
	steps := []struct {
		name     string
		advance  time.Duration
		apiErr   error
		id       Identity
		claimed  string
		wantErr  bool
		wantGets int
	}{
		{name: "first hello reads the pod", id: id, claimed: "hot", wantGets: 1},
		{name: "a second hello is answered from the cache", advance: 30 * time.Second, id: id, claimed: "hot", wantGets: 1},
		{name: "a forged claim is refused from the cache", id: id, claimed: "cold", wantErr: true, wantGets: 1},
		{name: "after the TTL the pod is read again", advance: 31 * time.Second, id: id, claimed: "hot", wantGets: 2},
		{name: "a failed read refuses", advance: 61 * time.Second, apiErr: apierrors.NewServiceUnavailable("etcd"), id: id, claimed: "hot", wantErr: true, wantGets: 3},
		{name: "and is not cached", id: id, claimed: "hot", wantGets: 4},
		{name: "another UID is read, not taken from the cache", id: Identity{Shard: shardID, PodUID: "new-uid"}, claimed: "hot", wantErr: true, wantGets: 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		api.mu.Lock()
		api.err = s.apiErr
		api.mu.Unlock()
		err := g.VerifyGroup(ctx, s.id, s.claimed)
		if (err != nil) != s.wantErr || api.getCount() != s.wantGets {
			t.Fatalf("%s: err %v (want error %v), %d pod GETs (want %d)", s.name, err, s.wantErr, api.getCount(), s.wantGets)
		}
	}
}

func TestNewPodGroupsChecksOptions(t *testing.T) {
	_, cs := newPodAPI()
	tests := []struct {
		name    string
		opts    PodGroupsOptions
		wantErr bool
	}{
		{name: "client and namespace", opts: PodGroupsOptions{Client: cs.CoreV1(), Namespace: ns}},
		{name: "no client", opts: PodGroupsOptions{Namespace: ns}, wantErr: true},
		{name: "no namespace", opts: PodGroupsOptions{Client: cs.CoreV1()}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPodGroups(tc.opts); (err != nil) != tc.wantErr {
				t.Fatalf("NewPodGroups: %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
