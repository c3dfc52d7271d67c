package resourcequota

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	quota "k8s.io/apiserver/pkg/quota/v1"
	clienttesting "k8s.io/client-go/testing"
)

const key = "ns/q"

func TestSyncStatusRule(t *testing.T) {
	hard := list("pods", "10", "requests.cpu", "4")
	pod := newPod("a", resources(list("cpu", "1"), nil))
	for _, tc := range []struct {
		name       string
		cached     *corev1.ResourceQuota // nil: not in the cache
		pods       []runtime.Object
		wantWrites []string
		wantStatus *corev1.ResourceQuotaStatus // nil: as cached
	}{
		{name: "gone from the cache: nothing"},
		{name: "never synced: hard copied, usage computed",
			cached: newQuota("q", hard), pods: []runtime.Object{pod},
			wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: hard, Used: list("pods", "1", "requests.cpu", "1")}},
		{name: "unchanged: no write",
			cached: newQuota("q", hard, synced(list("pods", "1", "requests.cpu", "1"))), pods: []runtime.Object{pod}},
		{name: "equal quantities in another format: no write",
			cached: newQuota("q", hard, synced(list("pods", "1", "requests.cpu", "1000m"))), pods: []runtime.Object{pod}},
		{name: "usage changed: written",
			cached: newQuota("q", hard, synced(list("pods", "2", "requests.cpu", "2"))), pods: []runtime.Object{pod},
			wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: hard, Used: list("pods", "1", "requests.cpu", "1")}},
		{name: "spec.hard changed: written with the new hard",
			cached: newQuota("q", hard, synced(list("pods", "1", "requests.cpu", "1")), func(q *corev1.ResourceQuota) {
				q.Status.Hard = list("pods", "5", "requests.cpu", "4")
			}), pods: []runtime.Object{pod},
			wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: hard, Used: list("pods", "1", "requests.cpu", "1")}},
		{name: "no used yet: written even if zero",
			cached:     newQuota("q", list("pods", "10"), func(q *corev1.ResourceQuota) { q.Status.Hard = list("pods", "10") }),
			wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: list("pods", "10"), Used: list("pods", "0")}},
		{name: "used only for the hard names: a dropped hard resource's usage goes",
			cached: newQuota("q", list("pods", "10"), synced(list("pods", "1", "requests.cpu", "1"))), pods: []runtime.Object{pod},
			wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: list("pods", "10"), Used: list("pods", "1")}},
		{name: "a hard resource nobody computes keeps its old usage",
			cached: newQuota("q", list("pods", "10", "example.com/x", "3"), synced(list("pods", "0", "example.com/x", "2"))),
			pods:   []runtime.Object{pod}, wantWrites: []string{"update resourcequotas/status"},
			wantStatus: &corev1.ResourceQuotaStatus{Hard: list("pods", "10", "example.com/x", "3"), Used: list("pods", "1", "example.com/x", "2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var api []runtime.Object
			if tc.cached != nil {
				api = append(api, tc.cached)
			}
			f := newFixture(t, api, append(api, tc.pods...)...)
			f.MustSync(key)
			if got := f.writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes %v, want %v", got, tc.wantWrites)
			}
			if tc.cached == nil {
				return
			}
			want := tc.cached.Status
			if tc.wantStatus != nil {
				want = *tc.wantStatus
			}
			got := f.status("q")
			if !quota.Equals(got.Hard, want.Hard) || !quota.Equals(got.Used, want.Used) {
				t.Errorf("status %+v, want %+v", got, want)
			}
		})
	}
}

// The status is written from the cached quota, its resourceVersion included: a quota
// changed meanwhile is a conflict, returned so that the quota is retried.
func TestSyncConflict(t *testing.T) {
	q := newQuota("q", list("pods", "10"))
	f := newFixture(t, []runtime.Object{q}, q)
	var sentRV string
	f.Client.PrependReactor("update", "resourcequotas", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sentRV = a.(clienttesting.UpdateAction).GetObject().(*corev1.ResourceQuota).ResourceVersion
		return true, nil, apierrors.NewConflict(corev1.Resource("resourcequotas"), "q", nil)
	})
	err := f.Sync(key)
	if !apierrors.IsConflict(err) {
		t.Errorf("sync error %v, want a conflict", err)
	}
	if sentRV != "1" {
		t.Errorf("update sent resourceVersion %q, want the cached quota's %q", sentRV, "1")
	}
}

func TestSyncMalformedKey(t *testing.T) {
	f := newFixture(t, nil)
	if err := f.Sync("a/b/c"); err != nil {
		t.Errorf("sync of a malformed key: %v, want it dropped", err)
	}
}
