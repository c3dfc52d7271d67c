package pvcprotection

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/data"

// The finalizer: added to a claim that lacks it, removed from a deleted claim once no pod
// uses it, kept while one does (asked of the cache first, then of the API server).
func TestSyncFinalizer(t *testing.T) {
	runner := newPod("web", ephemeralVol("scratch"))
	for _, tc := range []struct {
		name    string
		key     string // key when not "ns/data"
		cached  []runtime.Object
		api     []runtime.Object
		listErr bool
		// wantActions are the requests in order; wantFinalizers the claim's afterwards
		// (nil: not checked).
		wantActions    []string
		wantFinalizers []string
		wantErr        bool
	}{
		{name: "a claim not in the cache: nothing"},
		{name: "a claim with the finalizer: nothing", cached: objs(newClaim("data")), api: objs(newClaim("data"))},
		{name: "a claim without it gets it", cached: objs(newClaim("data", noFinalizer())), api: objs(newClaim("data", noFinalizer())),
			wantActions: []string{"update persistentvolumeclaims"}, wantFinalizers: []string{Finalizer}},
		{name: "other finalizers are kept when it is added", cached: objs(newClaim("data", finalizers("example.com/x"))),
			api:         objs(newClaim("data", finalizers("example.com/x"))),
			wantActions: []string{"update persistentvolumeclaims"}, wantFinalizers: []string{"example.com/x", Finalizer}},
		{name: "a deleted claim without it: nothing", cached: objs(newClaim("data", noFinalizer(), deleted()))},
		{name: "deleted, no pod: listed live, then removed", cached: objs(newClaim("data", deleted())),
			api:         objs(newClaim("data", deleted(), finalizers(Finalizer, "example.com/x"))),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}, wantFinalizers: nil},
		{name: "deleted, other finalizers kept", cached: objs(newClaim("data", deleted(), finalizers("example.com/x", Finalizer))),
			api:         objs(newClaim("data", deleted(), finalizers("example.com/x", Finalizer))),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}, wantFinalizers: []string{"example.com/x"}},
		{name: "deleted, a cached scheduled pod uses it: kept without a list",
			cached: objs(newClaim("data", deleted()), newPod("p", usesClaim("data"))), api: objs(newClaim("data", deleted()))},
		{name: "deleted, a pod the cache has not seen uses it: the live list keeps it",
			cached: objs(newClaim("data", deleted())), api: objs(newClaim("data", deleted()), newPod("p", usesClaim("data"))),
			wantActions: []string{"list pods"}},
		{name: "deleted, only an unscheduled pod uses it: removed",
			cached:      objs(newClaim("data", deleted()), newPod("p", usesClaim("data"), unscheduled())),
			api:         objs(newClaim("data", deleted()), newPod("p", usesClaim("data"), unscheduled())),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}},
		{name: "deleted, a finished pod naming it directly still keeps it (upstream's rule)",
			cached: objs(newClaim("data", deleted()), newPod("p", usesClaim("data"), phase(corev1.PodSucceeded))),
			api:    objs(newClaim("data", deleted()))},
		{name: "deleted, a pod of another claim: removed",
			cached:      objs(newClaim("data", deleted()), newPod("p", usesClaim("other"))),
			api:         objs(newClaim("data", deleted()), newPod("p", usesClaim("other"))),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}},
		{name: "deleted ephemeral claim of a running pod: kept", key: "ns/web-scratch",
			cached: objs(newClaim("web-scratch", deleted(), ownedBy(runner)), runner), api: objs(newClaim("web-scratch", deleted(), ownedBy(runner)))},
		{name: "deleted claim named like a pod's ephemeral volume but not the pod's: removed", key: "ns/web-scratch",
			cached:      objs(newClaim("web-scratch", deleted()), runner),
			api:         objs(newClaim("web-scratch", deleted()), runner),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}},
		{name: "deleted ephemeral claim of a pod in its grace period: kept", key: "ns/web-scratch",
			cached: objs(newClaim("web-scratch", deleted(), ownedBy(runner)), newPod("web", ephemeralVol("scratch"), podDeleting(30))),
			api:    objs(newClaim("web-scratch", deleted(), ownedBy(runner)))},
		{name: "deleted ephemeral claim of a shut-down pod (zero grace period): removed", key: "ns/web-scratch",
			cached:      objs(newClaim("web-scratch", deleted(), ownedBy(runner)), newPod("web", ephemeralVol("scratch"), podDeleting(0))),
			api:         objs(newClaim("web-scratch", deleted(), ownedBy(runner)), newPod("web", ephemeralVol("scratch"), podDeleting(0))),
			wantActions: []string{"list pods", "update persistentvolumeclaims"}},
		{name: "a failed live list is an error, the finalizer stays", cached: objs(newClaim("data", deleted())),
			api: objs(newClaim("data", deleted())), listErr: true, wantActions: []string{"list pods"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cached, tc.api...)
			if tc.listErr {
				f.Client.PrependReactor("list", "pods", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("boom")
				})
			}
			k := key
			if tc.key != "" {
				k = tc.key
			}
			if err := f.Sync(k); (err != nil) != tc.wantErr {
				t.Fatalf("sync error %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if slices.Contains(tc.wantActions, "update persistentvolumeclaims") {
				_, name, _ := splitKey(k)
				if got := f.claim(name).Finalizers; !slices.Equal(got, tc.wantFinalizers) {
					t.Errorf("finalizers %v, want %v", got, tc.wantFinalizers)
				}
			}
		})
	}
}

// The Unused condition of a Bound claim: False while a pod that has not terminated names
// it, True otherwise, written only when it changes.
func TestSyncUnusedCondition(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cached      []runtime.Object
		api         []runtime.Object
		wantActions []string
		// wantStatus and wantReason are the condition's afterwards ("": not written).
		wantStatus corev1.ConditionStatus
		wantReason string
	}{
		{name: "a Pending claim gets none", cached: objs(newClaim("data")), api: objs(newClaim("data"))},
		{name: "Bound, no pod: True", cached: objs(newClaim("data", bound())), api: objs(newClaim("data", bound())),
			wantActions: []string{"list pods", "update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionTrue, wantReason: reasonUnused},
		{name: "Bound, a cached pod names it: False without a list",
			cached: objs(newClaim("data", bound()), newPod("p", usesClaim("data"))), api: objs(newClaim("data", bound())),
			wantActions: []string{"update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionFalse, wantReason: reasonUsed},
		{name: "Bound, an unscheduled pod counts too", cached: objs(newClaim("data", bound()), newPod("p", usesClaim("data"), unscheduled())),
			api:         objs(newClaim("data", bound())),
			wantActions: []string{"update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionFalse, wantReason: reasonUsed},
		{name: "Bound, a pod only the API server has: False", cached: objs(newClaim("data", bound())),
			api:         objs(newClaim("data", bound()), newPod("p", usesClaim("data"))),
			wantActions: []string{"list pods", "update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionFalse, wantReason: reasonUsed},
		{name: "Bound, a finished pod does not count: True",
			cached:      objs(newClaim("data", bound()), newPod("p", usesClaim("data"), phase(corev1.PodFailed))),
			api:         objs(newClaim("data", bound()), newPod("p", usesClaim("data"), phase(corev1.PodFailed))),
			wantActions: []string{"list pods", "update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionTrue, wantReason: reasonUnused},
		{name: "Bound, a deleted pod with a container running counts: False",
			cached:      objs(newClaim("data", bound()), newPod("p", usesClaim("data"), podDeleting(30), containerRunning())),
			api:         objs(newClaim("data", bound())),
			wantActions: []string{"update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionFalse, wantReason: reasonUsed},
		{name: "Bound, a deleted pod with nothing running does not: True",
			cached:      objs(newClaim("data", bound()), newPod("p", usesClaim("data"), podDeleting(30))),
			api:         objs(newClaim("data", bound()), newPod("p", usesClaim("data"), podDeleting(30))),
			wantActions: []string{"list pods", "update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionTrue, wantReason: reasonUnused},
		{name: "Bound, already True and unused: not written", cached: objs(newClaim("data", bound(), unusedCond(corev1.ConditionTrue))),
			api: objs(newClaim("data", bound(), unusedCond(corev1.ConditionTrue))), wantActions: []string{"list pods"}},
		{name: "Bound, already False and used: not written",
			cached: objs(newClaim("data", bound(), unusedCond(corev1.ConditionFalse)), newPod("p", usesClaim("data"))),
			api:    objs(newClaim("data", bound(), unusedCond(corev1.ConditionFalse)))},
		{name: "Bound, True and now used: False", cached: objs(newClaim("data", bound(), unusedCond(corev1.ConditionTrue)), newPod("p", usesClaim("data"))),
			api:         objs(newClaim("data", bound(), unusedCond(corev1.ConditionTrue))),
			wantActions: []string{"update persistentvolumeclaims/status"}, wantStatus: corev1.ConditionFalse, wantReason: reasonUsed},
		{name: "Bound and deleted: no condition, the finalizer goes", cached: objs(newClaim("data", bound(), deleted())),
			api: objs(newClaim("data", bound(), deleted())), wantActions: []string{"list pods", "update persistentvolumeclaims"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cached, tc.api...)
			if err := f.Sync(key); err != nil {
				t.Fatal(err)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if tc.wantStatus == "" {
				return
			}
			c := unusedCondition(f.claim("data"))
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || !c.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("Unused condition %+v, want %s %s at %s", c, tc.wantStatus, tc.wantReason, t0)
			}
			want := map[string]string{reasonUsed: messageUsed, reasonUnused: messageUnused}[tc.wantReason]
			if c != nil && c.Message != want {
				t.Errorf("message %q, want %q", c.Message, want)
			}
		})
	}
}

// One sync asks the API server at most once, even when both checks need it.
func TestOneLiveListPerSync(t *testing.T) {
	c := newClaim("data", bound(), noFinalizer())
	f := newFixture(t, objs(c), c)
	if err := f.Sync(key); err != nil {
		t.Fatal(err)
	}
	if n := controllertest.Count(f.Client, "list", "pods"); n != 1 {
		t.Errorf("%d live lists, want 1", n)
	}
}

func TestHandlers(t *testing.T) {
	log := controllertest.Logger(t)
	for _, tc := range []struct {
		name string
		do   func(c *Controller)
		want []string
	}{
		{name: "a claim without the Unused condition", do: func(c *Controller) { c.claimChanged(log, newClaim("data")) }, want: []string{key}},
		{name: "a claim with the condition and the finalizer", do: func(c *Controller) {
			c.claimChanged(log, newClaim("data", bound(), unusedCond(corev1.ConditionTrue)))
		}},
		{name: "a claim without the finalizer", do: func(c *Controller) {
			c.claimChanged(log, newClaim("data", noFinalizer(), unusedCond(corev1.ConditionTrue)))
		}, want: []string{key}},
		{name: "a deleted claim with the finalizer", do: func(c *Controller) {
			c.claimChanged(log, newClaim("data", deleted(), unusedCond(corev1.ConditionTrue)))
		}, want: []string{key}},
		{name: "a pod queues every claim it names", do: func(c *Controller) {
			c.podChanged(log, nil, newPod("web", usesClaim("data"), ephemeralVol("scratch")))
		}, want: []string{key, "ns/web-scratch"}},
		{name: "a pod replaced by one of its name queues the old one's claims too", do: func(c *Controller) {
			c.podChanged(log, newPod("web", usesClaim("old")), newPod("web", usesClaim("data"), uid("new")))
		}, want: []string{key, "ns/old"}},
		{name: "an update of the same pod queues its claims only", do: func(c *Controller) {
			c.podChanged(log, newPod("web", usesClaim("old")), newPod("web", usesClaim("data")))
		}, want: []string{key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			tc.do(f.ctrl)
			got := f.Queue.Keys()
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}
